"""``solo-diet``'s thin commands: each parses its arguments, builds settings and calls a floor
below."""

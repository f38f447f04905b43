"""``solo-diet``'s thin commands."""

"""The spec: a YAML file or mapping in, one frozen, checked ``Spec`` out."""

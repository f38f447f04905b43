"""Small data-free experiments of the papers, reproduced in plain torch."""

"""predict: batch scoring of a table with a served version, through its serving_examples signature."""

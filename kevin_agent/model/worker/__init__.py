"""What runs inside a model worker: the person's model is imported and run only here."""

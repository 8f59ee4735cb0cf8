"""vtlab: Vocabulary Transfer for learned sparse retrieval (SPLADE) on modern encoders."""

__version__ = "0.1.0"

"""A small GPT in the style of Karpathy's minGPT: model.py (the network), trainer.py (the
training loop), utils.py (seeding and sampling). Used by play_char.ipynb."""

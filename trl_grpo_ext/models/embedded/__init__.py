"""The embedded models: a tiny character model and SmolLM2, built locally (no download).
"""

"""Training: the pieces the trainer wires in (sampling, engine steps, generation, checkpoints, interrupts, console
output, adapter precision).
"""

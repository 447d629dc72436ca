"""Calibrate the cost model on measured kernel times and check it against measured data.

``kernels`` turns the public kernel profiles into samples the cost model can price; ``fit`` fits a
GPU's efficiencies on one half of them; ``report`` scores the model on the other half;
``published`` replays published end-to-end serving results through the simulator.
"""

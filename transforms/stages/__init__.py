"""The Beam stages: one composite transform per module, thin DoFns over transforms.core."""

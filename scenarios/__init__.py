"""fedsim's scenario scripts, installed as the ``fedsim.scenarios`` package."""

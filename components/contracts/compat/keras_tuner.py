"""Keras Tuner 1.4.7's private names (components/contracts/compat/__init__.py, MEASURED_ON).

`set_oracle_project_dir(oracle, directory, name)`: where an Oracle used without a Tuner keeps
its state files. Keras Tuner's own Tuner does this through the private
`Oracle._set_project_dir(directory, project_name)` (keras_tuner/src/engine/base_tuner.py);
there is no public way for an Oracle on its own."""


def set_oracle_project_dir(oracle, directory: str, name: str) -> None:
    oracle._set_project_dir(directory, name)

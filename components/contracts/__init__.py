"""The floor every step stands on and no step owns: names, errors, storage, each step's
artifact layout (examples, statistics, feature specs, blessing) and the settings and pod
shape base models. A step imports these, never another step."""

"""Bridges to other RL frameworks. Each subpackage needs its framework installed
(the `verl` extra for `mapo.integrations.verl`: `pip install -e '.[verl]'` in a checkout); `import mapo` never does."""

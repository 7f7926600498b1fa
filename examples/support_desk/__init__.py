"""A customer-support de-escalation environment for mapo, written outside the package.

See README.md in this folder; the environment is `env.SupportDeskEnvironment`.
"""

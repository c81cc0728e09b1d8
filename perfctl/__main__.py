from perfctl.cli import entry

entry()

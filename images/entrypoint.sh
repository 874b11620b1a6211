#!/bin/sh
# The images' ENTRYPOINT. All of these run `paravt data --config c.yaml`:
#   docker run IMAGE data --config c.yaml
#   docker run IMAGE paravt data --config c.yaml
# A first word that names a program on PATH (python3, sh, bash: what KFP's launchers and
# kfp.local.DockerRunner pass as the container's arguments) runs that program as given; shell
# builtins (`eval` is one) are not programs, so `eval` stays the paravt stage. No arguments: help.
set -eu
if [ "$#" -eq 0 ]; then
    exec paravt --help
fi
case "$1" in
    paravt) shift; exec paravt "$@" ;;
    -*) exec paravt "$@" ;;
esac
# `command -v` prints a path for a program and a bare name for a builtin, alias or function.
case "$(command -v -- "$1" 2>/dev/null || true)" in
    /*) exec "$@" ;;
esac
exec paravt "$@"

"""The splitter: compiles client and @resumable generators into JSON continuation state machines.

Its passes (checks, normalisation, split, liveness, emission) arrive with the compiler;
until then tools run as native generators, which the runtime drives the same way.
"""

"""The virtual-time twin of the reference deployments (see ARCHITECTURE.md, "Two backends").

One process, a virtual clock: the servers' own sans-IO cores (engine, radix caches, router
and flow cores, instance cores with the handoff state machines) driven by a discrete-event
loop (:mod:`.sim`) over a link model (:mod:`.links`). :func:`.run.run_twin` replays the
harness's planned requests and returns its request records.
"""

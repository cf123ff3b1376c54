"""A run's execution: what replays a claimed run's handler and records what it did.

    flowctl.runtime.targets       finding and loading workflows (file.py:fn, module:fn, YAML)
    flowctl.runtime.engine        execute one claimed run; map how it stopped to a transition
    flowctl.runtime.context       the replay Context: one gate, call indexes, durable calls
    flowctl.runtime.live          a run while its handler executes (lease, budget, interrupts)
    flowctl.runtime.recorded      how a raised error is recorded, and rebuilt on replay
    flowctl.runtime.replay_check  would the code on disk break a run in flight (`flowctl check`)

What steps print is captured by flowctl.output, beside this package: YAML's command
steps (flowctl.yamlflow) capture it too, and this package loads YAML workflows.

Nothing here knows of daemons, front ends or SQL: runs reach the store through its protocol.
"""

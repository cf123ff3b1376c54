"""Schedules: when a schedule fires, and firing it.

    flowctl.schedule.calendar   cron, intervals, time zones and DST, due fires: pure
    flowctl.schedule.firing     the daemon's Scheduler: one store transaction per fire

The operator actions on schedules live in flowctl.ops.schedules.
"""

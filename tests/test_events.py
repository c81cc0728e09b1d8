import pytest

from perfctl.agent.events import DEFAULT_EVENTS, UnknownEvent, parse_event, parse_events


def test_hardware_events_default_to_user_scope_and_accept_modifiers():
    assert parse_event("instructions").scope == "user"
    assert parse_event("instructions:k").scope == "kernel"
    assert parse_event("cycles:uk").scope == "all"
    assert parse_event("cpu-cycles").name == "cycles"


def test_software_events_count_both_modes_by_default():
    spec = parse_event("page-faults")
    assert (spec.kind, spec.scope, spec.config) == ("software", "all", 2)
    assert parse_event("faults").name == "page-faults"
    assert parse_event("cs").name == "context-switches"
    assert parse_event("task-clock").unit == "ns"


def test_interrupt_events_name_their_tracepoints_with_fallback():
    spec = parse_event("timer-interrupts")
    assert spec.tracepoints == ("irq_vectors:local_timer_entry", "timer:hrtimer_expire_entry")
    assert parse_event("device-interrupts").tracepoints == ("irq:irq_handler_entry",)
    with pytest.raises(UnknownEvent, match="kernel context"):
        parse_event("timer-interrupts:u")


def test_perf_style_tracepoints_and_raw_events():
    assert parse_event("irq:softirq_entry").kind == "tracepoint"
    raw = parse_event("r82d0:u")
    assert (raw.kind, raw.config, raw.scope) == ("raw", 0x82D0, "user")


@pytest.mark.parametrize("bad", ["", "bogus", "instructions:z", "a:b:c", "x" * 200, "r", "page faults"])
def test_unknown_names_are_refused(bad):
    with pytest.raises(UnknownEvent):
        parse_event(bad)


def test_lists_split_on_commas_and_drop_duplicates():
    specs = parse_events(["instructions,page-faults", "faults", "instructions:u"])
    assert [s.label for s in specs] == ["instructions:u", "page-faults"]
    assert len(parse_events(list(DEFAULT_EVENTS))) == len(DEFAULT_EVENTS)

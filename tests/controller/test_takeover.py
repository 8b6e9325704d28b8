"""The standby's take-over against a switch that follows P4Runtime's arbitration: when the
primary goes, the switch has no primary (it tells the others NOT_FOUND with the highest election
id it has seen), and a standby becomes primary by arbitrating above that id
(controller/npm.py). tests/controller/test_runtime.py has the take-over's reconciliation."""

from __future__ import annotations

from controller.runtime import Controller
from tests.controller.conftest import ControllerFactory, wait_until
from tests.switch_double import SwitchDouble


def role(controller: Controller) -> str:
    return controller.states["npm1"].role


def test_the_standby_with_the_higher_election_id_takes_over_and_the_old_primary_stays_standby(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    """Two standbys (10, 15) told there is no primary both arbitrate above the highest id seen
    (20), each adding its own: 15's 35 wins over 10's 30, whatever order they arrive in. The
    old primary, restarted with its 20, is below 35 and stays a standby."""
    primary = make_controller(switch, election_id=20)
    low = make_controller(switch, election_id=10)
    high = make_controller(switch, election_id=15)
    assert (role(low), role(high)) == ("standby", "standby")
    primary.stop()
    wait_until(
        "15 to take over and 10 to stay standby",
        lambda: role(high) == "primary" and role(low) == "standby",
        timeout=10,
    )
    assert switch.service.highest_election_id == 20 + 15
    assert high.npms["npm1"].is_primary and not low.npms["npm1"].is_primary
    back = make_controller(switch, election_id=20)
    assert role(back) == "standby"
    assert role(high) == "primary" and high.npms["npm1"].is_primary

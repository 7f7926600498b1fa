"""EMPA need-vector dynamics: the state P_t, its ending rules, alignment and EPM-Q.

The user's need is a vector P_t (one component per axis, C/A/P for EMPA; <= 0 means
unmet need). The judge's six ordinal levels map to an action vector v_t and
P_t = P_{t-1} + v_t; the goal is the origin. Everything here is plain numpy and
follows DESIGN.md section 3; every constant lives in `DynamicsConfig`.

A zero start (P_0 = 0, so D_0 = 0) has no direction to move in: v*_0 is the zero
vector, every Delta E, projection and target alignment is 0, and the EPM-Q indices
that divide by r0 = D_0 (RDI, Etot, Snet) are 0. Nothing divides by zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mapo.core.types import AXES

PROG_KEYS = ("C_prog", "A_prog", "P_prog")
NEG_KEYS = ("C_neg", "A_neg", "P_neg")
LEVEL_KEYS = PROG_KEYS + NEG_KEYS
INDICATOR_KEYS = ("C1", "C2", "C3", "A1", "A2", "A3", "P1", "P2", "P3")

# Judge level -> contribution to v_t on that level's axis.
_PROG_VALUE = {0: 0.0, 1: 1.0, 2: 3.0}
_NEG_VALUE = {
    "C_neg": {0: 0.0, -1: -2.0, -2: -4.0},
    "A_neg": {0: 0.0, -1: -2.0, -2: -5.0},
    "P_neg": {0: 0.0, -1: -2.0, -2: -5.0},
}
# Indicator level 0-3 -> contribution to P_0 on its axis (deeper need = more negative).
_STANDARD_WEIGHTS = (0.0, -2.0, -4.0, -6.0)
_PRIORITY_WEIGHTS = (0.0, -3.0, -6.0, -9.0)
_CORE_WEIGHTS = (0.0, -4.0, -8.0, -12.0)
_INDICATOR_WEIGHTS = {
    "C1": _STANDARD_WEIGHTS,
    "C2": _STANDARD_WEIGHTS,
    "C3": _PRIORITY_WEIGHTS,
    "A1": _STANDARD_WEIGHTS,
    "A2": _CORE_WEIGHTS,
    "A3": _PRIORITY_WEIGHTS,
    "P1": _STANDARD_WEIGHTS,
    "P2": _CORE_WEIGHTS,
    "P3": _PRIORITY_WEIGHTS,
}

Status = str | None  # None while running, else "success" | "failure" | "timeout"


def _level(mapping: Mapping[str, Any], key: str, allowed: Sequence[int], what: str, keys: Sequence[str]) -> int:
    """The integer level under `key`, or a ValueError naming the key and the value."""
    if key not in mapping:
        raise ValueError(f"{what}: missing key {key!r} (expected keys {', '.join(keys)})")
    value = mapping[key]
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
    if ok and float(value) in allowed:
        return int(value)
    raise ValueError(f"{what}: {key}={value!r} is not one of {sorted(allowed)}")


def _reject_unknown(mapping: Mapping[str, Any], known: Sequence[str], what: str) -> None:
    unknown = sorted(str(k) for k in mapping if k not in known)
    if unknown:
        raise ValueError(f"{what}: unknown key(s) {', '.join(unknown)}; expected {', '.join(known)}")


def validate_levels(levels: Mapping[str, Any]) -> dict[str, int]:
    """The six judge levels as ints; ValueError naming any missing, unknown or out-of-set one."""
    if not isinstance(levels, Mapping):
        raise ValueError(f"judge levels: expected a dict with keys {', '.join(LEVEL_KEYS)}, got {type(levels).__name__}")
    _reject_unknown(levels, LEVEL_KEYS, "judge levels")
    out = {k: _level(levels, k, (0, 1, 2), "judge levels", LEVEL_KEYS) for k in PROG_KEYS}
    out.update({k: _level(levels, k, (0, -1, -2), "judge levels", LEVEL_KEYS) for k in NEG_KEYS})
    return out


def levels_to_vector(levels: Mapping[str, Any]) -> tuple[float, float, float]:
    """The action vector v_t = (c, a, p) from the judge's six levels.

    Per axis v = prog + neg with prog 0/1/2 -> 0/+1/+3, C_neg 0/-1/-2 -> 0/-2/-4,
    A_neg and P_neg 0/-1/-2 -> 0/-2/-5.
    """
    lv = validate_levels(levels)
    return tuple(  # type: ignore[return-value]
        _PROG_VALUE[lv[f"{axis}_prog"]] + _NEG_VALUE[f"{axis}_neg"][lv[f"{axis}_neg"]] for axis in AXES
    )


def initial_vector(indicators: Mapping[str, Any]) -> tuple[float, float, float]:
    """P_0 = (c, a, p) from the nine need indicators C1..P3 (levels 0-3); each axis in [-27, 0]."""
    if not isinstance(indicators, Mapping):
        raise ValueError(f"indicators: expected a dict with keys {', '.join(INDICATOR_KEYS)}, got {type(indicators).__name__}")
    _reject_unknown(indicators, INDICATOR_KEYS, "indicators")
    values = {k: _INDICATOR_WEIGHTS[k][_level(indicators, k, (0, 1, 2, 3), "indicators", INDICATOR_KEYS)] for k in INDICATOR_KEYS}
    return tuple(sum(values[f"{axis}{i}"] for i in (1, 2, 3)) for axis in AXES)  # type: ignore[return-value]


def _as_vector(v: Sequence[float], what: str, size: int | None = None) -> np.ndarray:
    try:
        arr = np.asarray(v, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what}: not a numeric vector: {v!r}") from err
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{what}: expected a non-empty 1-D vector, got shape {arr.shape}")
    if size is not None and arr.size != size:
        raise ValueError(f"{what}: expected {size} components, got {arr.size}: {list(arr)}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what}: non-finite component in {list(arr)}")
    return arr


def alignment(v: Sequence[float], reference: Sequence[float]) -> float:
    """cos(v, reference); 0 when either vector is zero."""
    a = np.asarray(v, dtype=float)
    b = np.asarray(reference, dtype=float)
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.clip(np.dot(a, b) / (na * nb), -1.0, 1.0))


def axis_alignment(v: Sequence[float], reference: Sequence[float]) -> tuple[float, ...]:
    """Each axis's share of cos(v, reference): v_k * ref_k / (|v| |ref|).

    The shares sum to `alignment(v, reference)`; all 0 when either vector is zero.
    """
    a = np.asarray(v, dtype=float)
    b = np.asarray(reference, dtype=float)
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return tuple(0.0 for _ in a)
    return tuple(float(x) + 0.0 for x in a * b / (na * nb))  # + 0.0 turns -0.0 into 0.0


@dataclass
class DynamicsConfig:
    """EMPA's constants (the defaults); training runs may shorten `max_turns`.

    `success_from_turn` is the first turn at which both success and failure are checked.
    """

    success_from_turn: int = 12
    max_turns: int = 45
    dist_frac: float = 0.1  # eps_dist = dist_frac * D_0
    dir_frac: float = 0.1  # eps_dir = dir_frac * D_0
    energy_frac: float = 1.0  # eps_energy = energy_frac * D_0
    regression_run: int = 5  # this many consecutive Delta E < 0 -> failure
    stagnation_window: int = 5  # std of the last this-many D_t ...
    stagnation_std: float = 0.5  # ... below this, and
    stagnation_lookback: int = 8  # among the last this-many Delta E
    stagnation_min_negative: int = 6  # at least this many < 0
    stagnation_sum: float = -1.0  # with their (the negative ones') sum below this -> failure

    def __post_init__(self) -> None:
        for name in ("success_from_turn", "max_turns", "regression_run", "stagnation_window", "stagnation_lookback"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"DynamicsConfig.{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.stagnation_min_negative, bool) or not isinstance(self.stagnation_min_negative, (int, np.integer)) \
                or not 0 <= self.stagnation_min_negative <= self.stagnation_lookback:
            raise ValueError(
                f"DynamicsConfig.stagnation_min_negative must be an integer in [0, stagnation_lookback="
                f"{self.stagnation_lookback}], got {self.stagnation_min_negative!r}"
            )
        for name in ("dist_frac", "dir_frac", "energy_frac", "stagnation_std", "stagnation_sum"):
            value = getattr(self, name)
            if not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value):
                raise ValueError(f"DynamicsConfig.{name} must be a finite number, got {value!r}")
        for name in ("dist_frac", "dir_frac", "energy_frac", "stagnation_std"):
            if getattr(self, name) < 0:
                raise ValueError(f"DynamicsConfig.{name} must be >= 0, got {getattr(self, name)!r}")


@dataclass
class StepInfo:
    """What one step did; `status` is None while the dialogue goes on."""

    turn: int
    delta_e: float
    distance: float
    projection: float
    alignment_target: float  # cos(v_t, v*_0)
    alignment_deficit: float  # cos(v_t, -P_{t-1})
    status: Status
    state: tuple[float, ...] = ()
    alignment_target_by_axis: tuple[float, ...] = ()
    alignment_deficit_by_axis: tuple[float, ...] = ()


class NeedState:
    """One dialogue's need vector and its history (DESIGN.md section 3)."""

    def __init__(self, p0: Sequence[float], config: DynamicsConfig | None = None) -> None:
        self.config = config if config is not None else DynamicsConfig()
        self.p0 = _as_vector(p0, "initial need vector p0")
        self.p = self.p0.copy()
        self.turn = 0
        d0 = float(np.linalg.norm(self.p0))
        # v*_0: unit vector from P_0 toward the origin; zero when P_0 is already there.
        self.target = -self.p0 / d0 if d0 > 0 else np.zeros_like(self.p0)
        self.distances: list[float] = [d0]
        self.vectors: list[np.ndarray] = []
        self.delta_e: list[float] = []
        self.projections: list[float] = [float(np.dot(self.p0, self.target))]
        self.levels: list[dict[str, int] | None] = []
        self.alignment_target: list[float] = []
        self.alignment_deficit: list[float] = []
        self.alignment_target_by_axis: list[tuple[float, ...]] = []
        self.alignment_deficit_by_axis: list[tuple[float, ...]] = []
        self._status: Status = None

    @property
    def d0(self) -> float:
        return self.distances[0]

    @property
    def distance(self) -> float:
        return self.distances[-1]

    @property
    def energy(self) -> float:
        """E_total = sum of Delta E so far."""
        return float(sum(self.delta_e))

    @property
    def projection(self) -> float:
        """P_t . v*_0 (-D_0 at the start, 0 at the goal's level)."""
        return self.projections[-1]

    def _delta_e(self, v: np.ndarray) -> float:
        # v . (-P_0) / D_0: the integer numerator keeps the sign exact for integer vectors.
        return float(np.dot(v, -self.p0)) / self.d0 if self.d0 > 0 else 0.0

    def step(self, v: Sequence[float], levels: Mapping[str, Any] | None = None) -> StepInfo:
        """Apply one turn's action vector v_t (and keep the judge's levels if given)."""
        if self._status is not None:
            raise RuntimeError(f"the dialogue already ended ({self._status} at turn {self.turn}); start a new NeedState")
        vec = _as_vector(v, f"action vector v_{self.turn + 1}", size=self.p0.size)
        lv = validate_levels(levels) if levels is not None else None
        deficit = -self.p
        self.p = self.p + vec
        self.turn += 1
        self.vectors.append(vec)
        self.levels.append(lv)
        self.delta_e.append(self._delta_e(vec))
        self.distances.append(float(np.linalg.norm(self.p)))
        self.projections.append(float(np.dot(self.p, self.target)))
        self.alignment_target.append(alignment(vec, self.target))
        self.alignment_deficit.append(alignment(vec, deficit))
        self.alignment_target_by_axis.append(axis_alignment(vec, self.target))
        self.alignment_deficit_by_axis.append(axis_alignment(vec, deficit))
        self._status = self._check_status()
        return StepInfo(
            turn=self.turn,
            delta_e=self.delta_e[-1],
            distance=self.distance,
            projection=self.projection,
            alignment_target=self.alignment_target[-1],
            alignment_deficit=self.alignment_deficit[-1],
            status=self._status,
            state=tuple(float(x) for x in self.p),
            alignment_target_by_axis=self.alignment_target_by_axis[-1],
            alignment_deficit_by_axis=self.alignment_deficit_by_axis[-1],
        )

    def status(self) -> Status:
        """None while running, else "success", "failure" or "timeout" (sticky once reached)."""
        return self._status

    def is_success(self) -> bool:
        cfg = self.config
        # Integer levels make exact ties common (e.g. landing on the origin, where E_total = D_0);
        # the slack keeps float rounding from deciding them.
        slack = 1e-9 * max(1.0, self.d0)
        if self.energy < cfg.energy_frac * self.d0 - slack:
            return False
        return self.distance <= cfg.dist_frac * self.d0 + slack or self.projection >= -cfg.dir_frac * self.d0 - slack

    def is_failure(self) -> bool:
        cfg = self.config
        run = self.delta_e[-cfg.regression_run :]
        if len(run) == cfg.regression_run and all(x < 0 for x in run):
            return True
        # Stagnation with regression: D_t barely moves while most recent turns push backward.
        recent_d = self.distances[1:][-cfg.stagnation_window :]
        recent_e = self.delta_e[-cfg.stagnation_lookback :]
        if len(recent_d) < cfg.stagnation_window or len(recent_e) < cfg.stagnation_lookback:
            return False
        negatives = [x for x in recent_e if x < 0]
        return (
            float(np.std(recent_d)) < cfg.stagnation_std
            and len(negatives) >= cfg.stagnation_min_negative
            and sum(negatives) < cfg.stagnation_sum
        )

    def _check_status(self) -> Status:
        if self.turn >= self.config.success_from_turn:
            if self.is_success():
                return "success"
            if self.is_failure():
                return "failure"
        if self.turn >= self.config.max_turns:
            return "timeout"
        return None

    def deepest_axis(self) -> str:
        """The axis with the most negative component of P_t (the first on ties)."""
        names = AXES if self.p.size == len(AXES) else tuple(str(i) for i in range(self.p.size))
        return names[int(np.argmin(self.p))]

    def record(self) -> dict[str, Any]:
        """The dialogue as plain JSON-ready data; `epmq` takes it."""
        return {
            "p0": [float(x) for x in self.p0],
            "state": [float(x) for x in self.p],
            "turns": self.turn,
            "status": self._status,
            "vectors": [[float(x) for x in v] for v in self.vectors],
            "levels": [dict(lv) if lv is not None else None for lv in self.levels],
            "distances": list(self.distances),
            "delta_e": list(self.delta_e),
            "energy": self.energy,
            "projections": list(self.projections),
            "alignment_target": list(self.alignment_target),
            "alignment_deficit": list(self.alignment_deficit),
            "alignment_target_by_axis": [list(a) for a in self.alignment_target_by_axis],
            "alignment_deficit_by_axis": [list(a) for a in self.alignment_deficit_by_axis],
            "config": asdict(self.config),
        }


EPMQ_INDICES = ("RDI", "Etot", "Snet", "Rho", "Sproj", "Tau", "Rpos", "Align", "Pen")


def epmq(record: Mapping[str, Any]) -> dict[str, float]:
    """EMPA's EPM-Q score of one dialogue, with its nine indices and three components.

    Reads only `p0`, `vectors` and `levels` from the record (everything else is
    recomputed, so a hand-built record works). Returns RDI, Etot, Snet (outcome),
    Rho, Sproj, Tau (efficiency), Rpos, Align, Pen (stability), "outcome",
    "efficiency", "stability" (each the mean of its three) and "epmq" =
    0.4 outcome + 0.2 efficiency + 0.4 stability (not capped at 100). Rho and Sproj
    coincide by definition (E_total / turns is the mean Delta E); both are kept
    because EMPA reports both.
    """
    for key in ("p0", "vectors", "levels"):
        if key not in record:
            raise ValueError(f"epmq record: missing key {key!r} (NeedState.record() produces one)")
    p0 = _as_vector(record["p0"], "epmq record p0")
    vectors = [_as_vector(v, f"epmq record vectors[{i}]", size=p0.size) for i, v in enumerate(record["vectors"])]
    levels = record["levels"]
    turns = len(vectors)
    if turns == 0:
        raise ValueError("epmq record: no turns (vectors is empty); EPM-Q needs at least one turn")
    if len(levels) != turns:
        raise ValueError(f"epmq record: {len(levels)} levels for {turns} vectors; need one dict of levels per turn")
    checked = []
    for i, lv in enumerate(levels):
        if lv is None:
            raise ValueError(f"epmq record: levels[{i}] (turn {i + 1}) is missing; EPM-Q needs the judge's levels")
        checked.append(validate_levels(lv))

    state = NeedState(p0, DynamicsConfig(success_from_turn=turns + 1, max_turns=turns + 1))
    for v in vectors:
        state.step(v)
    r0 = state.d0
    e_total = state.energy
    net_levels = sum(sum(lv.values()) for lv in checked)
    neg_magnitude = sum(-lv[k] for lv in checked for k in NEG_KEYS)
    path_length = float(sum(np.linalg.norm(v) for v in vectors))
    displacement = float(np.linalg.norm(state.p - p0))

    idx = {
        "RDI": float(np.clip((100.0 * (r0 - state.distance) / r0 + 100.0) / 2.0, 0.0, 100.0)) if r0 > 0 else 0.0,
        "Etot": max(0.0, e_total) / (1.2 * r0) * 100.0 if r0 > 0 else 0.0,
        "Snet": max(0.0, net_levels) / (1.5 * r0) * 100.0 if r0 > 0 else 0.0,
        "Rho": max(0.0, e_total / turns) / 2.5 * 100.0,
        "Sproj": max(0.0, float(np.mean(state.delta_e))) / 2.5 * 100.0,
        "Tau": max(0.0, (3.0 - path_length / displacement) / 2.0 * 100.0) if displacement > 0 else 0.0,
        "Rpos": 100.0 * sum(1 for x in state.delta_e if x > 0) / turns,
        "Align": (float(np.mean(state.alignment_target)) + 1.0) / 2.0 * 100.0,
        "Pen": max(0.0, (3.0 - neg_magnitude / turns) / 3.0 * 100.0),
    }
    outcome = (idx["RDI"] + idx["Etot"] + idx["Snet"]) / 3.0
    efficiency = (idx["Rho"] + idx["Sproj"] + idx["Tau"]) / 3.0
    stability = (idx["Rpos"] + idx["Align"] + idx["Pen"]) / 3.0
    return {
        **idx,
        "outcome": outcome,
        "efficiency": efficiency,
        "stability": stability,
        "epmq": 0.4 * outcome + 0.2 * efficiency + 0.4 * stability,
    }

"""The testbed's gates: what a π_0 must show on dev before any RL, and when each is met.

Every threshold is written once, in ``GATES``; the checks here are pure arithmetic on measured
figures (``maopd.study.tuning.gate_figures`` measures them, ``maopd tune gates`` prints and saves them).

1. **Closed-book recall by popularity band**, after pretraining (``pretrained/``) and of the
   fine-tuned model as the Searcher reporting without a search: recall on the ``popular`` band at
   least ``popular_recall``, and on the ``long_tail`` band at most ``long_tail_above_chance`` above
   the band's chance rate. Popular facts must be known and long-tail ones not, so that skipping
   search is right on the first and wrong on the second. The middle band is a description, and so
   is the fine-tuned model asked as a language model the way ``pretrained/`` is (what fine-tuning
   kept).
2. **Forced no search vs forced search** on the popular band's 1-hop questions (the cascade):
   EM(no search) at least ``no_search_ratio`` × EM(search), so that skipping search is a real
   temptation where the model knows the answer.
3. **The judge** (the Prompted Critic's): balanced accuracy at least ``judge_accuracy`` on the
   held-out balanced set of decidable labels with at least ``judge_negatives`` negatives, and a
   judge rate on the model's own dev reports strictly inside ``judge_rate``: a judge that says yes
   (or no) to everything rewards nothing.
4. **π_0's level**: macro avg@k inside ``level`` (inclusive) in every workflow, room to improve
   and something to improve from; and in every workflow at least ``searching_share`` of the
   workflows search at least once, so that search is the habit RL starts from.

A check is ``met``, ``not met`` or ``not measured``; the verdict is ``all met`` only when every
check is met.

**A recipe's gates** (``recipe_gates``, ``maopd tune recipe-gates``): one π_0 config built with
several fine-tuning seeds (``SFTConfig.finetune_seed``) is read as one testbed. Each figure is
averaged over the builds (a ratio's parts, not the ratio) and every check applies to the means;
each build's own values and verdicts are shown beside them, so the build-to-build spread is read
with the verdict rather than decided by one build's draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MET, NOT_MET, NOT_MEASURED, DESCRIPTION = "met", "not met", "not measured", "description"
ALL_MET, NOT_ALL_MET = "all met", "not all met"
# Figures are shares and their differences in floating point: a figure that equals its threshold
# (0.4 - 0.3 against 0.1) must count as at the threshold.
TOLERANCE = 1e-9


@dataclass(frozen=True)
class GateThresholds:
    popular_recall: float = 0.60  # recall on the popular band, at least
    long_tail_above_chance: float = 0.10  # long-tail recall minus its chance rate, at most
    no_search_ratio: float = 0.7  # EM(forced no search) / EM(forced search), at least
    judge_accuracy: float = 0.75  # balanced accuracy on the held-out decidable set, at least
    judge_negatives: int = 100  # negatives in that set, at least
    judge_rate: tuple[float, float] = (0.05, 0.95)  # judge rate on own dev reports, strictly inside
    level: tuple[float, float] = (0.20, 0.60)  # macro avg@k of every workflow, inclusive
    searching_share: float = 0.70  # share of a workflow's runs that search at least once, at least


GATES = GateThresholds()
# The workflows "every workflow" meant when these gates were committed; a workflow registered since
# is not gated by them.
GATED_WORKFLOWS = ("hierarchical", "cascade", "single")


@dataclass(frozen=True)
class CollapseThresholds:
    """The preconditions of search collapse, for the testbed on which the paper's decisive claim
    (outcome RL drops search, OPD keeps it) is posed. Measured in the hierarchy on dev over every
    question type (``maopd.study.tuning.collapse_figures``), read per π_0 build, never on a mean
    over builds. Searching must pay, but only a little, as in the paper (26.0 → 21.8 EM when search
    was lost): skipping it must tempt."""

    ratio: tuple[float, float] = (0.80, 0.95)  # EM(forced no search) / EM(forced search), inclusive
    paired_points: tuple[float, float] = (-5.0, -1.0)  # mean within-question EM difference, points, inclusive
    search_em: float = 0.50  # EM(forced search), at least
    questions: int = 300  # dev questions measured, at least
    attempts: int = 4  # workflows per question and arm, at least
    judge_auc: float = 0.70  # ROC AUC of the judge's P(yes) against gold on π_0's own dev reports, at least
    judge_rate: tuple[float, float] = (0.2, 0.8)  # judge rate on π_0's own dev reports, inclusive


COLLAPSE = CollapseThresholds()


def at_least(value: float, bound: float) -> bool:
    return value >= bound - TOLERANCE


def at_most(value: float, bound: float) -> bool:
    return value <= bound + TOLERANCE


def verdict(ok: bool | None) -> str:
    """``met``/``not met`` for a check, ``not measured`` when it could not be made (None)."""
    return NOT_MEASURED if ok is None else MET if ok else NOT_MET


def popular_recall_met(recall: float) -> bool:
    return at_least(recall, GATES.popular_recall)


def long_tail_met(recall: float, chance: float) -> bool:
    return at_most(recall - chance, GATES.long_tail_above_chance)


def no_search_met(em_no_search: float, em_search: float) -> bool:
    return at_least(em_no_search, GATES.no_search_ratio * em_search)


def judge_checks(accuracy: float | None, negatives: int, judge_rate: float) -> dict[str, bool]:
    low, high = GATES.judge_rate
    return {
        "balanced_accuracy": accuracy is not None and at_least(accuracy, GATES.judge_accuracy),
        "negatives": negatives >= GATES.judge_negatives,
        "judge_rate": low < judge_rate < high,
    }


def level_met(avg: float) -> bool:
    low, high = GATES.level
    return at_least(avg, low) and at_most(avg, high)


def searching_met(share: float) -> bool:
    return at_least(share, GATES.searching_share)


def _row(gate: str, check: str, value: str, threshold: str, state: str, note: str = "") -> dict[str, str]:
    return {"gate": gate, "check": check, "value": value, "threshold": threshold, "verdict": state, "note": note}


def _f(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def recall_rows(gate: str, figures: dict[str, Any]) -> list[dict[str, str]]:
    """Gate 1's rows for one way of asking (``fact_recall.recall_report``'s figures, or
    ``{"not_measured": reason}``)."""
    lt = f"<= chance + {GATES.long_tail_above_chance}"
    if "not_measured" in figures:
        reason = figures["not_measured"]
        return [
            _row(gate, "popular recall", "—", f">= {GATES.popular_recall}", NOT_MEASURED, reason),
            _row(gate, "long-tail recall (chance)", "—", lt, NOT_MEASURED, reason),
        ]
    bands = figures["bands"]
    rows = []
    popular, tail, middle = bands["popular"], bands["long_tail"], bands["middle"]
    ok = popular_recall_met(popular["recall"]) if popular["facts"] else None
    rows.append(
        _row(
            gate,
            "popular recall",
            _f(popular["recall"]),
            f">= {GATES.popular_recall}",
            verdict(ok),
            f"{popular['facts']} facts",
        )
    )
    ok = long_tail_met(tail["recall"], tail["chance"]) if tail["facts"] else None
    value = f"{_f(tail['recall'])} ({_f(tail['chance'])})"
    rows.append(_row(gate, "long-tail recall (chance)", value, lt, verdict(ok), f"{tail['facts']} facts"))
    value = f"{_f(middle['recall'])} ({_f(middle['chance'])})"
    rows.append(_row(gate, "middle recall (chance)", value, "—", DESCRIPTION, f"{middle['facts']} facts"))
    return rows


def retention_row(figures: dict[str, Any]) -> dict[str, str]:
    """A description: the fine-tuned model asked the facts' questions as a language model, the way
    ``pretrained/`` is asked, per band; beside gate 1 it shows what fine-tuning kept."""
    bands = figures["bands"]
    value = " / ".join(_f(bands[b]["recall"]) for b in ("popular", "middle", "long_tail"))
    return _row("recall after fine-tuning", "popular / middle / long-tail recall", value, "—", DESCRIPTION)


def forced_search_rows(figures: dict[str, Any]) -> list[dict[str, str]]:
    gate = "forced no search vs search"
    threshold = f"no search >= {GATES.no_search_ratio} x search"
    if "not_measured" in figures:
        return [_row(gate, "EM no search / search", "—", threshold, NOT_MEASURED, figures["not_measured"])]
    no_search, search = figures["no_search"]["em"], figures["search"]["em"]
    note = f"{figures['questions']} questions x {figures['attempts']} attempts"
    value = f"{_f(no_search)} / {_f(search)}"
    return [_row(gate, "EM no search / search", value, threshold, verdict(no_search_met(no_search, search)), note)]


def judge_rows(figures: dict[str, Any]) -> list[dict[str, str]]:
    gate = "judge"
    low, high = GATES.judge_rate
    accuracy_threshold = f">= {GATES.judge_accuracy} on >= {GATES.judge_negatives} negatives"
    rate_threshold = f"in ({low}, {high})"
    if "not_measured" in figures:
        reason = figures["not_measured"]
        return [
            _row(gate, "balanced accuracy", "—", accuracy_threshold, NOT_MEASURED, reason),
            _row(gate, "judge rate on own dev reports", "—", rate_threshold, NOT_MEASURED, reason),
        ]
    balanced = figures["balanced"]
    rate = figures["critic/judge_rate"]
    checks = judge_checks(balanced["balanced_accuracy"], balanced["negatives"], rate)
    value = f"{_f(balanced['balanced_accuracy'])} ({balanced['negatives']} negatives)"
    ok = checks["balanced_accuracy"] and checks["negatives"]
    return [
        _row(gate, "balanced accuracy", value, accuracy_threshold, verdict(ok), f"{balanced['examples']} examples"),
        _row(
            gate,
            "judge rate on own dev reports",
            _f(rate),
            rate_threshold,
            verdict(checks["judge_rate"]),
            f"{figures['workflows']} workflows",
        ),
        _row(gate, "ROC AUC of P(yes) vs gold", _f(figures["p_yes_auc_vs_gold"]), "—", DESCRIPTION),
    ]


def level_rows(systems: dict[str, dict[str, Any]], attempts: int) -> list[dict[str, str]]:
    """Gate 4's rows from ``maopd.study.tuning.dev_eval``'s figures, one system per workflow."""
    low, high = GATES.level
    avg = f"avg@{attempts}"
    rows = []
    for workflow, figures in systems.items():
        macro = figures[avg]["macro"]
        rows.append(
            _row("level", f"{workflow} macro {avg}", _f(macro), f"in [{low}, {high}]", verdict(level_met(macro)))
        )
    for workflow, figures in systems.items():
        share = figures["searching_share"]
        rows.append(
            _row(
                "searching",
                f"{workflow} share searching",
                _f(share),
                f">= {GATES.searching_share}",
                verdict(searching_met(share)),
                f"{figures['workflows']} workflows",
            )
        )
    return rows


def gate_rows(figures: dict[str, Any]) -> list[dict[str, str]]:
    """Every gate's rows from ``maopd.study.tuning.gate_figures``'s ``figures`` (its four parts)."""
    recall, level = figures["closed_book_recall"], figures["level"]
    systems = {name: part for name, part in level.items() if isinstance(part, dict)}  # one per workflow
    return [
        *recall_rows("recall after pretraining", recall["pretrained"]),
        retention_row(recall["finetuned_language_model"]),
        *recall_rows("recall as Searcher, no search", recall["searcher"]),
        *forced_search_rows(figures["forced_search"]),
        *judge_rows(figures["judge"]),
        *level_rows(systems, level["attempts"]),
    ]


def mean_figures(parts: list[Any]) -> Any:
    """The mean of several builds' figures, leaf by leaf: numbers are averaged (a leaf missing or
    None in one build is None; equal ones, such as counts, kept as they are), anything else is kept
    when every build has the same; a part one build could not measure is not measured for the recipe."""
    first = parts[0]
    if isinstance(first, dict):
        unmeasured = [p["not_measured"] for p in parts if isinstance(p, dict) and "not_measured" in p]
        if unmeasured:
            return {"not_measured": unmeasured[0]}
        if not all(isinstance(p, dict) for p in parts):
            return None
        return {key: mean_figures([p.get(key) for p in parts]) for key in first}
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        numbers = [p for p in parts if isinstance(p, (int, float)) and not isinstance(p, bool)]
        if len(numbers) < len(parts):
            return None
        return first if all(n == first for n in numbers) else sum(numbers) / len(numbers)  # counts stay ints
    if isinstance(first, list) and all(isinstance(p, list) and len(p) == len(first) for p in parts):
        return [mean_figures(list(column)) for column in zip(*parts)]
    return first if all(p == first for p in parts) else None


def recipe_gates(builds: list[dict[str, Any]]) -> dict[str, Any]:
    """The gates of one recipe from its builds' ``maopd tune gates`` results (module docstring):
    rows on the mean figures, each with every build's value and verdict."""
    try:
        settings = [(b["world"], b["eval_world"], b["quick"], b["figures"]["level"]) for b in builds]
        settings = [(*rest, level["questions"], level["attempts"]) for *rest, level in settings]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"a build's gates.json lacks {exc}; pass the files maopd tune gates wrote") from None
    if len(builds) < 2 or any(s != settings[0] for s in settings):
        raise ValueError(
            "a recipe's gates need two or more builds measured alike (world, questions, attempts, --quick); "
            "run maopd tune gates with the same options on each build"
        )
    mean = mean_figures([b["figures"] for b in builds])
    rows = gate_rows(mean)
    per_build = [gate_rows(b["figures"]) for b in builds]
    for index, row in enumerate(rows):
        row["builds"] = [{"value": own[index]["value"], "verdict": own[index]["verdict"]} for own in per_build]
    return {
        "builds": [{"model": b["model"], "config_key": b["config_key"], "verdict": b["verdict"]} for b in builds],
        "rows": rows,
        "verdict": overall(rows),
        "figures": mean,
    }


def recipe_table(result: dict[str, Any]) -> str:
    """``recipe_gates``' rows as markdown: every build's value (✗ where its own check fails), then
    the mean and its verdict."""
    names = [f"build {i + 1}" for i in range(len(result["builds"]))]
    lines = [
        "| gate | check | threshold | " + " | ".join(names) + " | mean | verdict on the mean |",
        "|---|---|---|" + "---|" * (len(names) + 2),
    ]
    for row in result["rows"]:
        values = [b["value"] + (" ✗" if b["verdict"] in (NOT_MET, NOT_MEASURED) else "") for b in row["builds"]]
        lines.append(
            f"| {row['gate']} | {row['check']} | {row['threshold']} | "
            + " | ".join(values)
            + f" | {row['value']} | {row['verdict']} |"
        )
    return "\n".join(lines)


def within(value: float | None, bounds: tuple[float, float]) -> bool | None:
    return None if value is None else at_least(value, bounds[0]) and at_most(value, bounds[1])


def collapse_rows(figures: dict[str, Any]) -> list[dict[str, str]]:
    """The collapse preconditions' rows for one build from ``collapse_figures``' figures."""
    gate = "collapse preconditions"
    note = f"{figures['questions']} questions x {figures['attempts']} attempts, hierarchy, dev"
    enough = figures["questions"] >= COLLAPSE.questions and figures["attempts"] >= COLLAPSE.attempts
    sample = f">= {COLLAPSE.questions} questions x {COLLAPSE.attempts}"
    checks = [
        ("sample", f"{figures['questions']} x {figures['attempts']}", sample, enough),
        (
            "EM no search / search",
            _f(figures["ratio"]),
            f"in [{COLLAPSE.ratio[0]}, {COLLAPSE.ratio[1]}]",
            within(figures["ratio"], COLLAPSE.ratio),
        ),
        (
            "mean paired difference, points",
            f"{figures['paired_difference_points']:.1f}",
            f"in [{COLLAPSE.paired_points[0]}, {COLLAPSE.paired_points[1]}]",
            within(figures["paired_difference_points"], COLLAPSE.paired_points),
        ),
        (
            "EM forced search",
            _f(figures["search_em"]),
            f">= {COLLAPSE.search_em}",
            at_least(figures["search_em"], COLLAPSE.search_em),
        ),
    ]
    return [_row(gate, check, value, threshold, verdict(ok), note) for check, value, threshold, ok in checks]


def collapse_judge_rows(figures: dict[str, Any]) -> list[dict[str, str]]:
    """The judge's rows of the collapse testbed: it must separate π_0's own reports by gold
    correctness, and say yes to neither almost all nor almost none of them."""
    gate = "judge on own reports"
    if "not_measured" in figures:
        return [
            _row(gate, "AUC of P(yes) vs gold", "—", f">= {COLLAPSE.judge_auc}", NOT_MEASURED, figures["not_measured"])
        ]
    auc, rate = figures.get("p_yes_auc_vs_gold"), figures["critic/judge_rate"]
    low, high = COLLAPSE.judge_rate
    return [
        _row(
            gate,
            "AUC of P(yes) vs gold",
            _f(auc),
            f">= {COLLAPSE.judge_auc}",
            verdict(None if auc is None else at_least(auc, COLLAPSE.judge_auc)),
        ),
        _row(gate, "judge rate", _f(rate), f"in [{low}, {high}]", verdict(within(rate, COLLAPSE.judge_rate))),
    ]


def per_build_verdict(builds: list[list[dict[str, str]]]) -> str:
    """``all met`` only when every build meets every check on its own: a testbed read per build."""
    return ALL_MET if builds and all(overall(rows) == ALL_MET for rows in builds) else NOT_ALL_MET


def overall(rows: list[dict[str, str]]) -> str:
    """``all met`` when every check (descriptions aside) is met."""
    checks = [row["verdict"] for row in rows if row["verdict"] != DESCRIPTION]
    return ALL_MET if checks and all(v == MET for v in checks) else NOT_ALL_MET


def markdown_table(rows: list[dict[str, str]]) -> str:
    lines = ["| gate | check | value | threshold | verdict | note |", "|---|---|---|---|---|---|"]
    lines += [
        f"| {r['gate']} | {r['check']} | {r['value']} | {r['threshold']} | {r['verdict']} | {r['note']} |" for r in rows
    ]
    return "\n".join(lines)

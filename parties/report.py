"""The custodian's register and report (issue 37): what ran on this registry's data, from its own state
folder, as one self-contained HTML page and as JSON.

``confar-party report --config party.toml --out report.html [--json [report.json]]`` reads, and never
writes, the state folder: the audit log (who asked what and when, the data snapshot of each daemon start,
every refusal and every session a coordinator aborted), the privacy ledger with its journal (every charge),
the decision ledger and the approvals (``parties.approvals``). The page has the registry's data snapshots
(record count and SHA-256 per start), the studies and their approvals (with each study's spend against its
cap), one row per run (study, coordinator, dates, analysis, reveal mode and security, decisions, ε charged
by the registry's accountant and by the other readings, what was released), the budget as a chart of ε
spent over time against the limit, the refusals and aborts with their reasons, and the threat model in
plain sentences. It needs no network to open: inline CSS and SVG, no script, no font or image fetched.

**Numbers.** Every figure is computed from the ledger the daemon enforces, by its accountant
(``PrivacyLedger.spent`` for the total; the same budget's ``spend`` over a run's or a study's charges,
found by the labels the daemon writes on them: ``session <id>``, ``run <id>``, ``study <digest>``): the
chart's last point is the ledger's spend itself. The chart orders sessions by the time they opened (audit
log) and composes the charges of the sessions so far (at most ``MAX_POINTS`` points, the last always the
whole ledger). Charges without a session on the label (ledgers from before labels named it) count from the
first point.

**Bad state** (:class:`ReportError`, naming the file): a ledger journal with a torn last line (a charge whose
write never completed, from a crash; start the daemon once, which drops it and says so in the audit log),
any other damage of the journal or ledger, an approvals file that cannot be trusted. Nothing is written then.
An audit line that is not JSON (the daemon writing it just now) is skipped and counted on the page.

The live view (``[admin] listen``, ``parties.admin``) serves the same page from the daemon.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parties.approvals import APPROVALS_FILE, ApprovalError, read_approvals, signer_of, utc_now
from parties.config import PartyConfig
from parties.governance import study_events
from parties.journal import JOURNAL_FILE, JournalError, read_journal
from parties.privacy_budget import LedgerFileError, PrivacyBudgetStore
from proto.study import SHORT

MAX_POINTS = 60
RELEASED = {
    "sum": "noisy sums",
    "blinded": "blinded products",
    "sign": "accept bits",
    "svt": "SVT output bits",
}
_SESSION = re.compile(r"session ([0-9a-f]{16})")
_RUN = re.compile(r"; run (\S+)$")
_PARTY_RPCS = {
    "OpenSession",
    "ConnectSession",
    "Evaluate",
    "PlanPrivacy",
    "ProbeLinks",
    "PrivacyReport",
    "Status",
}


class ReportError(RuntimeError):
    """The state folder cannot be reported on (the message names the file and what is wrong)."""


@dataclass
class _Run:
    key: str
    run_id: str
    sessions: list[str]
    who: str
    study: str
    analysis: str
    modes: list[str]
    security: str
    first: str
    last: str
    decisions: int = 0
    closed: str = ""
    by_mode: dict[str, int] | None = None


def _audit(path: Path) -> tuple[list[dict[str, Any]], int]:
    if not path.exists():
        return [], 0
    out, bad = [], 0
    for line in path.read_bytes().splitlines():
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            bad += 1
            continue
        if isinstance(obj, dict):
            out.append(obj)
        else:
            bad += 1
    return out, bad


def _decisions_used(cfg: PartyConfig, journal: Any) -> int:
    path = cfg.state_dir / "ledger.json"
    used, seq = 0, journal.after if journal is not None else 0
    if path.exists():
        try:
            doc = json.loads(path.read_text())
            used, seq = int(doc["decisions_used"]), int(doc.get("journal_seq", 0))
        except (ValueError, KeyError, TypeError) as exc:
            raise ReportError(f"decision ledger {path} is corrupt ({exc})") from exc
    later = journal.records_after(seq, path) if journal is not None else ()
    return used + sum(int(r.get("decisions", 0)) for r in later)


def _readings(budget: Any, events: Sequence[Any], delta: float | None) -> dict[str, Any]:
    """ε of ``events`` by the registry's accountant and the other readings (PLD ε at δ, GDP μ)."""
    from mechanisms.privacy import compose_events

    if not events:
        return {"accountant": 0.0, "pld_eps": 0.0 if delta else None, "gdp_mu": 0.0}
    out: dict[str, Any] = {"accountant": budget.spend(events) if budget is not None else None}
    mus = [e.gdp_mu() for e in events]
    out["gdp_mu"] = (
        math.sqrt(sum(e.count * mu * mu for e, mu in zip(events, mus, strict=True)))
        if all(mu is not None for mu in mus)
        else None
    )
    out["pld_eps"] = compose_events(list(events)).eps_at(delta) if delta else None
    return out


def collect(cfg: PartyConfig, now: dt.datetime | None = None) -> dict[str, Any]:
    """The report's content (the JSON form), read from ``cfg.state_dir`` without writing anything."""
    now = now or utc_now()
    state = cfg.state_dir
    if not state.is_dir():
        raise ReportError(f"state folder {state} ([party] state_dir) does not exist: the daemon has not run")
    try:
        journal = read_journal(state / JOURNAL_FILE, cfg.identity)
    except JournalError as exc:
        raise ReportError(str(exc)) from exc
    if journal is not None and journal.torn:
        raise ReportError(
            f"ledger journal {journal.path} ends in a torn line (a charge whose write never completed: the "
            "daemon stopped while writing it, and no share of that step left); start the daemon once, "
            "which drops it and records that in the audit log, then ask for the report again"
        )
    try:
        store = PrivacyBudgetStore.load(cfg, journal, read_only=True)
    except (LedgerFileError, JournalError) as exc:
        raise ReportError(str(exc)) from exc
    decisions_used = _decisions_used(cfg, journal)
    try:
        book = read_approvals(state / APPROVALS_FILE, signer_of(cfg))
    except ApprovalError as exc:
        raise ReportError(str(exc)) from exc
    audit, unreadable = _audit(state / "audit.log")
    budget, ledger = store.budget, store.ledger
    events = list(ledger.events) if ledger is not None else []
    delta = getattr(budget, "delta", None)
    unit = budget.unit if budget is not None else ""
    limit = budget.limit if budget is not None else None
    spent = ledger.spent() if ledger is not None and budget is not None else None

    from mechanisms.privacy.threat import plain_threat_sentence

    doc: dict[str, Any] = {
        "confar_report": 1,
        "generated": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "registry": {
            "id": cfg.id,
            "identity": cfg.identity,
            "coordinator": cfg.coordinator_identity,
            "config": str(cfg.source),
            "state_dir": str(state),
            "require_approval": cfg.require_approval,
            "peers": [p.identity for p in cfg.peers],
        },
        "budget": {
            "configured": budget is not None,
            "type": budget.to_dict()["type"] if budget is not None else None,
            "unit": unit,
            "limit": limit,
            "spent": spent,
            "remaining": None if spent is None or limit is None else max(0.0, limit - spent),
            "delta": delta,
            "neighbours": cfg.neighbours,
            "colluding": "all" if cfg.colluding is None else cfg.colluding,
            "decisions_used": decisions_used,
            "max_decisions": cfg.max_decisions,
            "charges": len(events),
        },
        "threat_model": plain_threat_sentence(
            neighbours=cfg.neighbours,
            colluding=cfg.colluding,
            m=len(cfg.peers) + 1,
            t=None,
            security=None,
        ),
        "snapshots": [
            {k: x.get(k) for k in ("time", "source", "where", "records", "bytes", "sha256", "schema")}
            for x in audit
            if x.get("what") == "DataSnapshot"
        ],
        "audit_unreadable_lines": unreadable,
    }
    doc["studies"] = _studies(book, store, now)
    doc["runs"] = _runs(audit, store, delta)
    approved = {s["study"] for s in doc["studies"]}
    for x in audit:  # studies whose sessions ran here without an approval (approval not required)
        d = x.get("study")
        if x.get("what") == "OpenSession" and x.get("outcome") == "ok" and d and d not in approved:
            approved.add(d)
            doc["studies"].append(
                {
                    "study": d,
                    "title": x.get("study_title", ""),
                    "reference": x.get("study_reference", ""),
                    "approved_at": None,
                    "approved_by": None,
                    "max_epsilon": None,
                    "delta": None,
                    "expires": None,
                    "note": "",
                    "revoked": None,
                    "live": False,
                    "status": "not approved here: ran under the registry's budget alone",
                    "spent_epsilon": _spend(store, study_events(events, d)),
                    "charges": len(study_events(events, d)),
                    "requested_epsilon": None,
                }
            )
    doc["chart"] = _chart(audit, store)
    doc["refusals"], doc["aborts"] = _incidents(audit)
    return doc


def _spend(store: PrivacyBudgetStore, events: Sequence[Any]) -> float | None:
    """ε of ``events`` by the registry's accountant (None without an eps-at-delta budget: no ε to state)."""
    if store.budget is None or getattr(store.budget, "delta", None) is None:
        return None
    return store.budget.spend(events) if events else 0.0


def _studies(book: Any, store: PrivacyBudgetStore, now: dt.datetime) -> list[dict[str, Any]]:
    from mechanisms.privacy import GDPBudget, gdp_eps
    from parties.governance import cap_budget

    out = []
    events = list(store.ledger.events) if store.ledger is not None else []
    for a in book.approvals.values():
        row = a.to_dict(now)
        mine = study_events(events, a.study.digest)
        spent = None
        if store.budget is not None:
            cap = cap_budget(store.budget, a)
            value = cap.spend(mine) if mine else 0.0
            spent = gdp_eps(value, a.delta) if isinstance(cap, GDPBudget) and value else value
        row.update(spent_epsilon=spent, charges=len(mine), requested_epsilon=a.study.epsilon)
        out.append(row)
    return out


def _runs(
    audit: list[dict[str, Any]], store: PrivacyBudgetStore, delta: float | None
) -> list[dict[str, Any]]:
    runs: dict[str, _Run] = {}
    of_session: dict[str, str] = {}
    modes: dict[str, str] = {}
    for x in audit:
        sid = str(x.get("session") or "")[:16]
        if x.get("what") == "OpenSession" and x.get("outcome") == "ok" and sid:
            key = str(x.get("run_id") or f"session {sid}")
            r = runs.get(key)
            if r is None:
                r = runs[key] = _Run(
                    key=key,
                    run_id=str(x.get("run_id") or ""),
                    sessions=[],
                    who=str(x.get("who") or ""),
                    study=str(x.get("study") or ""),
                    analysis=str(x.get("analysis") or ""),
                    modes=[],
                    security=str(x.get("security") or "semi-honest"),
                    first=str(x.get("time")),
                    last=str(x.get("time")),
                )
            r.sessions.append(sid)
            mode = str(x.get("reveal_mode") or "")
            if mode and mode not in r.modes:
                r.modes.append(mode)
            of_session[sid] = key
            modes[sid] = mode
        elif sid in of_session:
            r = runs[of_session[sid]]
            r.last = str(x.get("time"))
            if x.get("what") == "Evaluate" and x.get("outcome") == "ok":
                n = int(x.get("decisions_charged", x.get("decisions")) or 0)  # a re-evaluation: 0
                r.decisions += n
                r.by_mode = r.by_mode or {}
                r.by_mode[modes[sid]] = r.by_mode.get(modes[sid], 0) + n
            if x.get("what") == "CloseSession":
                r.closed = str(x.get("reason") or "")
    events = list(store.ledger.events) if store.ledger is not None else []
    out = []
    for r in runs.values():
        mine = [e for e in events if (m := _SESSION.search(e.label or "")) and m[1] in r.sessions]
        read = _readings(store.budget, mine, delta) if store.budget is not None else {}
        released = "; ".join(
            f"{k} {RELEASED.get(md, md)} (reveal {md})" for md, k in (r.by_mode or {}).items()
        )
        out.append(
            {
                "run": r.run_id or None,
                "sessions": r.sessions,
                "study": r.study or None,
                "coordinator": r.who,
                "first": r.first,
                "last": r.last,
                "analysis": r.analysis,
                "reveal_modes": r.modes,
                "security": r.security,
                "decisions": r.decisions,
                "epsilon": read.get("accountant"),
                "pld_eps": read.get("pld_eps"),
                "gdp_mu": read.get("gdp_mu"),
                "charges": len(mine),
                "released": released or "nothing",
                "last_close": r.closed or None,
            }
        )
    return out


def _chart(audit: list[dict[str, Any]], store: PrivacyBudgetStore) -> list[dict[str, Any]]:
    """(time, spent) after each session (at its last audit line), in the order they opened; the last point is
    the ledger's spend."""
    if store.ledger is None or store.budget is None or not store.ledger.events:
        return []
    opened: dict[str, str] = {}  # session -> when it opened (the order)
    ended: dict[str, str] = {}  # session -> its last line (when its charges were all made)
    for x in audit:
        sid = str(x.get("session") or "")[:16]
        if x.get("what") == "OpenSession" and x.get("outcome") == "ok" and sid and sid not in opened:
            opened[sid] = str(x.get("time"))
        if sid in opened:
            ended[sid] = str(x.get("time"))
    events = list(store.ledger.events)
    sessions_of = [(m[1] if (m := _SESSION.search(e.label or "")) else "") for e in events]
    order = sorted({s for s in sessions_of if s}, key=lambda s: opened.get(s, ""))
    if len(order) > MAX_POINTS:
        step = len(order) / MAX_POINTS
        keep = {order[min(len(order) - 1, round((i + 1) * step) - 1)] for i in range(MAX_POINTS)}
    else:
        keep = set(order)
    points, seen = [], {""}
    for sid in order:
        seen.add(sid)
        if sid not in keep:
            continue
        mine = [e for e, s in zip(events, sessions_of, strict=True) if s in seen]
        points.append({"time": ended.get(sid, ""), "session": sid, "spent": store.budget.spend(mine)})
    if points:
        points[-1]["spent"] = store.ledger.spent()  # all events, in the ledger's order: the ledger's figure
    return points


def _incidents(audit: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    refusals, aborts = [], []
    for x in audit:
        what, outcome = x.get("what"), x.get("outcome")
        row = {
            "time": x.get("time"),
            "who": x.get("who"),
            "what": what,
            "session": x.get("session"),
            "step": x.get("step"),
            "outcome": outcome,
            "reason": x.get("detail") or x.get("reason") or "",
        }
        if what == "PlanPrivacy" and outcome == "ok" and x.get("would_refuse"):  # its dry run said no
            refusals.append({**row, "outcome": "would refuse (dry run)"})
        elif what == "CloseSession" and outcome == "ok" and x.get("reason") not in (None, "", "done"):
            aborts.append({**row, "outcome": "aborted by the coordinator"})
        elif outcome not in ("ok", None) and (
            what in _PARTY_RPCS or what in ("PeerExchange", "PrecomputeAhead")
        ):
            refusals.append(row)
    return refusals, aborts


# ---- HTML ----------------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1180px;
color:#1d2430;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d5dbe3;
padding-bottom:4px}
.sub{color:#5b6675}table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{border:1px solid #d5dbe3;padding:4px 7px;text-align:left;vertical-align:top}
th{background:#eef2f7;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#1a7f37}.bad{color:#b42318}.mono{word-break:break-all;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.cards{display:flex;gap:12px;flex-wrap:wrap}.card{border:1px solid #d5dbe3;border-radius:6px;padding:8px 12px;
min-width:160px}.card b{display:block;font-size:20px}
svg text{font:11px system-ui,sans-serif;fill:#3b4552}
"""


def _e(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def num(v: Any) -> str:
    """How the page prints a figure (and the tests read it back): 6 significant digits."""
    if v is None:
        return "–"
    return f"{float(v):.6g}"


def _table(tid: str, head: Sequence[str], rows: Sequence[Sequence[tuple[str, str]]], empty: str) -> str:
    if not rows:
        return f'<p id="{tid}-none" class="sub">{_e(empty)}</p>'
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f'<td class="{c}">{v}</td>' if c else f"<td>{v}</td>" for v, c in row) + "</tr>"
        for row in rows
    )
    return f'<table id="{tid}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _svg_chart(
    points: list[dict[str, Any]], limit: float | None, unit: str, caps: Sequence[tuple[str, float]] = ()
) -> str:
    """The spend after each session (a step line) against the registry's limit and, in the same unit, the
    caps of its live studies (dotted, labelled)."""
    if not points:
        return '<p id="budget-chart-none" class="sub">Nothing charged yet.</p>'
    w, h, left, right, top, bottom = 860, 280, 64, 20, 16, 48
    times = [_parse_time(p["time"]) for p in points]
    t0 = min(times)
    t1 = max(times)
    span = max((t1 - t0).total_seconds(), 1.0)
    top_v = max([p["spent"] for p in points] + ([limit] if limit is not None else [])) * 1.08 or 1.0
    caps = [(name, v) for name, v in caps if v <= top_v]

    def x(t: dt.datetime) -> float:
        return left + (w - left - right) * ((t - t0).total_seconds() / span if len(points) > 1 else 0.5)

    def y(v: float) -> float:
        return top + (h - top - bottom) * (1.0 - v / top_v)

    parts = [
        f'<svg id="budget-chart" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" role="img" aria-label="privacy spent over time against the limit">',
        f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="#8a94a3"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#8a94a3"/>',
    ]
    for i in range(5):
        v = top_v * i / 4
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{num(v)}</text>')
        parts.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{w - right}" y2="{y(v):.1f}" stroke="#eef2f7"/>')
    if limit is not None:
        parts.append(
            f'<line id="budget-limit" data-limit="{num(limit)}" x1="{left}" y1="{y(limit):.1f}" '
            f'x2="{w - right}" y2="{y(limit):.1f}" stroke="#b42318" stroke-dasharray="6 4"/>'
            f'<text x="{w - right}" y="{y(limit) - 5:.1f}" text-anchor="end" fill="#b42318">'
            f"limit {num(limit)}</text>"
        )
    for i, (name, v) in enumerate(caps):
        parts.append(
            f'<line class="study-cap" data-cap="{num(v)}" x1="{left}" y1="{y(v):.1f}" x2="{w - right}" '
            f'y2="{y(v):.1f}" stroke="#b26b00" stroke-dasharray="2 3"/>'
            f'<text x="{left + 6 + 170 * i}" y="{y(v) - 5:.1f}" fill="#b26b00">'
            f"cap of {_e(name)}: {num(v)}</text>"
        )
    xy = []
    prev = 0.0
    for t, p in zip(times, points, strict=True):  # a step: the spend holds until the next session's charges
        xy.append(f"{x(t):.1f},{y(prev):.1f}")
        xy.append(f"{x(t):.1f},{y(p['spent']):.1f}")
        prev = p["spent"]
    parts.append(f'<polyline points="{" ".join(xy)}" fill="none" stroke="#1f5fbf" stroke-width="2"/>')
    for t, p in zip(times, points, strict=True):
        parts.append(
            f'<circle class="point" data-spent="{num(p["spent"])}" data-time="{_e(p["time"])}" '
            f'cx="{x(t):.1f}" cy="{y(p["spent"]):.1f}" r="3.5" fill="#1f5fbf">'
            f"<title>{_e(p['time'])}: {num(p['spent'])}</title></circle>"
        )
    parts.append(f'<text x="{left}" y="{h - bottom + 18}">{_e(points[0]["time"][:19])}</text>')
    if len(points) > 1:
        parts.append(
            f'<text x="{w - right}" y="{h - bottom + 18}" text-anchor="end">'
            f"{_e(points[-1]['time'][:19])}</text>"
        )
    parts.append(f'<text x="{(left + w) / 2}" y="{h - 8}" text-anchor="middle">time (UTC); {_e(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _short(run: dict[str, Any]) -> str:
    """A run's id as the table shows it (the whole id is its title and in the JSON)."""
    rid = str(run["run"] or f"session {run['sessions'][0]}")
    return rid if len(rid) <= 20 else rid[:19] + "…"


def _parse_time(text: str) -> dt.datetime:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def render_html(doc: dict[str, Any], refresh_s: int | None = None) -> str:
    """The page (``refresh_s``: the live view reloads itself, by a meta tag: no script)."""
    reg, b = doc["registry"], doc["budget"]
    refresh = f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if refresh_s else ""
    cards = [
        ("spent", f"{num(b['spent'])}", b["unit"] or "no privacy budget configured"),
        ("limit", f"{num(b['limit'])}", "the registry's budget"),
        ("remaining", f"{num(b['remaining'])}", b["unit"]),
        ("decisions", f"{b['decisions_used']}", f"of {b['max_decisions']} allowed"),
    ]
    card_html = "".join(
        f'<div class="card" id="card-{k}"><span class="sub">{_e(k)}</span><b>{_e(v)}</b>'
        f'<span class="sub">{_e(s)}</span></div>'
        for k, v, s in cards
    )
    snaps = [
        [
            (_e(s["time"]), ""),
            (_e(s["source"]), ""),
            (_e(s["where"]), "mono"),
            (_e(s["records"]), "num"),
            (_e(s["sha256"]), "mono"),
        ]
        for s in doc["snapshots"]
    ]
    studies = [
        [
            (f'<span class="mono">{_e(s["study"][:SHORT])}</span><br>{_e(s["title"])}', ""),
            (_e(s["reference"]), ""),
            (f"{_e(s['approved_at'])}<br>by {_e(s['approved_by'])}" if s["approved_at"] else "–", ""),
            (num(s["max_epsilon"]) + f" at δ {num(s['delta'])}" if s["max_epsilon"] else "–", "num"),
            (num(s["spent_epsilon"]), "num"),
            (num(s["requested_epsilon"]), "num"),
            (_e(s["expires"]), ""),
            (f'<span class="{"ok" if s["live"] else "bad"}">{_e(s["status"])}</span>', ""),
        ]
        for s in doc["studies"]
    ]
    runs = [
        [
            (f'<span class="mono" title="{_e(r["run"] or r["sessions"][0])}">{_e(_short(r))}</span>', ""),
            (f'<span class="mono">{_e((r["study"] or "")[:SHORT])}</span>' if r["study"] else "–", ""),
            (_e(r["coordinator"]), ""),
            (f"{_e(r['first'][:19])}<br>{_e(r['last'][:19])}", ""),
            (_e(r["analysis"]), ""),
            (f"{_e(', '.join(r['reveal_modes']))}; {_e(r['security'])}", ""),
            (_e(r["decisions"]), "num"),
            (num(r["epsilon"]), "num"),
            (f"PLD ε {num(r['pld_eps'])}; GDP μ {num(r['gdp_mu'])}", ""),
            (_e(r["released"]), ""),
            (_e(r["last_close"] or ""), ""),
        ]
        for r in doc["runs"]
    ]

    def incident_rows(rows: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
        return [
            [
                (_e(x["time"]), ""),
                (_e(x["who"]), ""),
                (_e(x["what"]), ""),
                (f'<span class="mono">{_e((x["session"] or "")[:16])}</span>', ""),
                (_e(x["step"]), "num"),
                (f'<span class="bad">{_e(x["outcome"])}</span>', ""),
                (_e(x["reason"]), ""),
            ]
            for x in rows
        ]

    ihead = ("time (UTC)", "caller", "call", "session", "step", "outcome", "reason")
    unit = b["unit"] or ""
    skipped = doc.get("audit_unreadable_lines", 0)
    note = (
        f'<p class="sub">{skipped} audit line(s) could not be read and are not shown.</p>' if skipped else ""
    )
    approval = "required" if reg["require_approval"] else "not required"
    caps = [  # live studies' caps, where they are in the chart's unit (epsilon at the budget's delta)
        (f"study {s['study'][:8]}", float(s["max_epsilon"]))
        for s in doc["studies"]
        if s["live"] and s["max_epsilon"] and b["type"] in ("eps_delta", "renyi") and s["delta"] == b["delta"]
    ]
    snap_head = ("daemon start (UTC)", "source", "where", "records", "SHA-256")
    study_head = ("study", "reference", "approved", "cap ε", "spent ε", "asked ε", "expires", "status")
    run_head = (
        "run",
        "study",
        "coordinator",
        "first / last (UTC)",
        "analysis",
        "reveal; security",
        "decisions",
        "ε (accountant)",
        "other readings",
        "released",
        "closed",
    )
    tables = {
        "snapshots": _table("snapshots", snap_head, snaps, "No data snapshot recorded."),
        "studies": _table("studies", study_head, studies, "No study approved here."),
        "runs": _table("runs", run_head, runs, "No session ran."),
        "refusals": _table("refusals", ihead, incident_rows(doc["refusals"]), "Nothing was refused."),
        "aborts": _table("aborts", ihead, incident_rows(doc["aborts"]), "No session was aborted."),
    }
    body = f"""
<h1>{_e(reg["identity"])}: what ran on this registry's data</h1>
<p class="sub">Registry {_e(reg["id"])} ({_e(reg["identity"])}); coordinator {_e(reg["coordinator"])};
consortium peers {_e(", ".join(reg["peers"]))}; study approval {approval}.
Generated {_e(doc["generated"])} from {_e(reg["state_dir"])}. Every figure is this registry's own ledger,
by its own accountant.</p>
<h2 id="h-budget">Privacy budget</h2>
<div class="cards">{card_html}</div>
<p class="sub">{_e(unit)}; {_e(b["neighbours"])} neighbours; accounting assumes colluding =
{_e(b["colluding"])}; {_e(b["charges"])} charges on the ledger.</p>
{_svg_chart(doc["chart"], b["limit"], unit, caps)}
<h2 id="h-snapshots">Data snapshots</h2>
{tables["snapshots"]}
<h2 id="h-studies">Studies and approvals</h2>
{tables["studies"]}
<h2 id="h-runs">Runs</h2>
{tables["runs"]}
<h2 id="h-refusals">Refusals</h2>
{tables["refusals"]}
<h2 id="h-aborts">Aborted sessions</h2>
{tables["aborts"]}
{note}
<h2 id="h-threat">Threat model</h2>
<p id="threat-model">{_e(doc["threat_model"])}</p>
"""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"{refresh}<title>{_e(reg['identity'])}: registry report</title><style>{_CSS}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def render_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"

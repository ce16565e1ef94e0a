"""The disruption round: which nodes to remove now, and with what in their place.

``plan`` runs upstream's methods over a picture of the cluster taken by the caller:

1. Expiration, always: a node past its ``expireAfter`` (its NodeClaim's own, else its
   NodePool's) is deleted at once (forceful: no budget, no do-not-disrupt, no replacement
   first; its pods are provisioned anew).
2. Then the first of these that finds something wins the round, as in upstream's loop:
   emptiness (every empty node, one delete command), drift (the empty drifted nodes, else one
   drifted node replaced), multi-node consolidation (the largest prefix of the sorted candidates
   that one cheaper node, or none, can replace) and single-node consolidation (the first
   candidate that can be deleted or replaced by a cheaper node; a node whose last such command
   its re-check cancelled backs off a while, karpweb's addition).
3. Karpweb's repacking, when single-node consolidation looked at every candidate and found
   nothing (in this round, or over the rounds since the last command: see ``Progress``): a
   NodePool's candidates, as many as its budget allows (five at most), packed anew by THE
   solver's cost-optimizing packing onto the room the other nodes have and onto fewer new
   nodes, when that saves at least ``REPACK_MIN_SAVINGS`` of their price. Upstream's
   methods replace with one node at most and pack as the greedy does, so a cluster of full
   small nodes (each too full to go alone, none two of which one cheaper node holds) stays as
   it is; larger nodes carry less reserved overhead per pod, and the other nodes' scattered
   room takes pods only when several nodes' pods are placed together.

Every simulation is a run of THE solver on the cluster without the nodes in question. Budgets
are counted per NodePool and reason. Every candidate left alone gets a sentence saying why.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from provisioning.crd.labels import NODEPOOL
from provisioning.disruption import balanced, budgets
from provisioning.disruption.candidates import (
    consolidation_order,
    consolidation_wait,
    describe_pods,
    expire_after,
    expired,
    grace_period,
    interleave_pools,
    not_consolidatable,
    recheck_backoff,
)
from provisioning.disruption.model import (
    DRIFTED,
    EMPTY,
    EXPIRED,
    UNDERUTILIZED,
    Candidate,
    Command,
    DisruptionPlan,
    PoolPolicy,
    Progress,
)
from provisioning.disruption.pricing import price_each, price_replacement, worst_launch_price
from provisioning.disruption.simulation import Solve, simulate
from provisioning.disruption.static import drift_replacements
from provisioning.disruption.text import duration, money, nodes_phrase, plural
from provisioning.scheduling.plan import ClaimPlan
from provisioning.scheduling.snapshot import Snapshot
from provisioning.scheduling.static import PoolCount, node_limit, template_claim, unlaunchable

MAX_MULTI_NODE_CANDIDATES = 100  # upstream's bound on one multi-node consolidation
# Repacking moves many pods at once for what upstream's methods leave: it must save at least this
# share of the nodes' price (less is not worth the disruption, nor the risk that the packing,
# time-limited, comes out otherwise on the re-check).
REPACK_MIN_SAVINGS = 0.05
REPACK_MAX_NODES = 5  # a repacking's nodes at most: larger moves drained over many rounds churn
MIN_REPACK_SECONDS = 0.5  # a repacking started before the round's time ran out may finish it
SETTLED = (
    "nothing to do: single-node consolidation looked at it since the last command and found no cheaper "
    "arrangement without it; this round repacking looks further"
)
EMPTINESS, DRIFT, MULTI_NODE, SINGLE_NODE, REPACKING = (
    "emptiness",
    "drift",
    "multi-node consolidation",
    "single-node consolidation",
    "repacking",
)
METHODS = (EMPTINESS, DRIFT, MULTI_NODE, SINGLE_NODE, REPACKING)  # upstream's order, then karpweb's


def method_of(reason: str, nodes: int) -> str | None:
    """The method that planned a command of ``reason`` over ``nodes`` nodes, for a command that
    does not say (None: expiration)."""
    if reason == EMPTY:
        return EMPTINESS
    if reason == DRIFTED:
        return DRIFT
    if reason == UNDERUTILIZED:
        return MULTI_NODE if nodes > 1 else SINGLE_NODE
    return None


def plan(
    candidates: Sequence[Candidate],
    policies: Mapping[str, PoolPolicy],
    cluster: Snapshot,
    now: float,
    *,
    spot_to_spot: bool = False,
    solve: Solve | None = None,
    after: str | None = None,
    budget_seconds: float | None = None,
    progress: Progress | None = None,
    recheck: bool = False,
    repacking: bool = True,
) -> DisruptionPlan:
    """Plan this round's disruptions.

    ``candidates`` are the Karpenter-managed nodes (those already disrupting included: they use
    up budgets, and their pods need a home in every simulation). ``cluster`` is the whole
    cluster as a solver snapshot: every node that can take pods (in-flight NodeClaims included)
    with the pods bound to it, the NodePools with their instance types, the DaemonSets, and
    the pending pods (they join every simulation). ``spot_to_spot`` is upstream's
    SpotToSpotConsolidation feature gate. ``solve`` defaults to THE solver. ``after``: a
    method (``METHODS``) whose command failed its re-check this round: only the methods after
    it are tried, as upstream's loop goes on to the next method. ``budget_seconds`` bounds the
    consolidation methods' simulations (upstream times them out too); single-node consolidation
    and repacking then stop where they are and say so, and the plan's ``progress`` is where they
    go on next round (given back as ``progress``), so every candidate is looked at in turn and
    repacking gets its rounds however few candidates a round has time for. ``recheck``: the
    candidates not blocked are a planned command's, asked whether they can still go; multi-node
    consolidation then simulates them all together first (upstream's validation simulates the
    command as it is), before looking for the largest prefix. ``repacking``: False leaves
    karpweb's repacking out (upstream's methods alone).
    """
    if solve is None:
        from provisioning.scheduling.solver import solve as solve_snapshot

        solve = solve_snapshot
    round_ = _Round(candidates, policies, cluster, now, spot_to_spot, solve)
    round_.deadline = None if budget_seconds is None else time.perf_counter() + budget_seconds
    round_.budget_seconds = budget_seconds
    round_.progress = progress or Progress()
    round_.recheck = recheck
    round_.repacking = repacking
    return round_.run(after)


class _Budget:
    """One method's use of the budgets for one reason: each node it picks takes one unit."""

    def __init__(self, round_: _Round, reason: str) -> None:
        self.round = round_
        self.reason = reason
        self.final = reason == DRIFTED
        self.taken: Counter[str] = Counter()

    def left(self, pool: str) -> int:
        r = self.round
        busy = r.disrupting_count[pool] + self.taken[pool]
        return budgets.allowed(r.policies[pool], self.reason, r.node_count[pool], busy, r.now)

    def why_exhausted(self, pool: str) -> str:
        r = self.round
        text = budgets.explain(
            r.policies[pool], self.reason, r.node_count[pool], r.disrupting_count[pool], r.now, chosen=self.taken[pool]
        )
        return f"budget exhausted: {text}"

    def take(self, candidate: Candidate) -> bool:
        """Take a unit for the candidate; when none is left, say so on the candidate."""
        if self.left(candidate.nodepool) <= 0:
            self.round.note(candidate, self.why_exhausted(candidate.nodepool), final=self.final)
            return False
        self.taken[candidate.nodepool] += 1
        return True


class _Round:
    def __init__(
        self,
        candidates: Sequence[Candidate],
        policies: Mapping[str, PoolPolicy],
        cluster: Snapshot,
        now: float,
        spot_to_spot: bool,
        solve: Solve,
    ) -> None:
        self.candidates = list(candidates)
        self.policies = policies
        self.cluster = cluster
        self.now = now
        self.spot_to_spot = spot_to_spot
        self.solve = solve
        self.pools = {pool.name: pool for pool in cluster.nodepools}
        self.why_not: dict[str, str] = {}
        self.deadline: float | None = None
        self.budget_seconds: float | None = None
        self.progress = Progress()
        self.recheck = False
        self.repacking = True
        # Where single-node consolidation and repacking go on next round, whether they ran, and
        # how much of their ground they covered (single-node consolidation: the candidates it
        # looked at this round, and those its time left unreached).
        self.next_resume = self.next_window = 0
        self.single_node_ran = self.repacking_ran = False
        self.reached = self.unreached = 0
        self.windows_looked = 0
        self.windows: int | None = None  # (None: repacking did not look this round)
        self.single_node_candidates: int | None = None  # (None: it did not run)
        self.final_notes: set[str] = set()
        self.uninitialized = frozenset(c.name for c in candidates if not c.initialized)
        # Budgets count the pool's initialized nodes; those NotReady or already going away use
        # them up (upstream's BuildDisruptionBudgetMapping).
        self.node_count = Counter(c.nodepool for c in candidates if c.initialized)
        self.disrupting_count = Counter(
            c.nodepool for c in candidates if c.initialized and (c.disrupting or not c.ready)
        )
        self.leaving = [c for c in candidates if c.disrupting]
        # Nodes still inside their consolidateAfter take no moved pods (upstream's
        # enforceConsolidateAfter), so a move never lands on a node that is settling.
        self.cooling = frozenset(
            c.name
            for c in candidates
            if c.nodepool in policies and (consolidation_wait(c, policies[c.nodepool], now) or 0) > 0
        )
        self.pool_nodes: dict[str, list[Candidate]] = {}
        for c in candidates:
            self.pool_nodes.setdefault(c.nodepool, []).append(c)

    def note(self, candidate: Candidate, why: str, *, final: bool = False) -> None:
        """Record why the candidate is left alone. A later method's sentence replaces an earlier
        one (it looked closer), except a ``final`` one: drift's word on a drifted node stands."""
        if candidate.name in self.final_notes:
            return
        self.why_not[candidate.name] = why
        if final:
            self.final_notes.add(candidate.name)

    # ------------------------------------------------------------------ the round

    def run(self, after: str | None = None) -> DisruptionPlan:
        commands = self._expire()
        expiring = {name for command in commands for name in command.candidates}
        for c in self.candidates:
            if c.name in expiring:
                self.leaving.append(c)
                self.disrupting_count[c.nodepool] += 1
        open_ = self._open(c for c in self.candidates if c.name not in expiring)
        winner = ""
        ways = (self._emptiness, self._drift, self._multi_node, self._single_node, self._repack)
        methods = dict(zip(METHODS, ways, strict=True))
        skip = METHODS.index(after) + 1 if after in METHODS else 0
        for label in METHODS[skip:]:
            method = methods[label]
            found = method(open_)
            if found:
                commands += [replace(command, method=label) for command in found]
                winner = label
                break
        chosen = {name for command in commands for name in command.candidates}
        left_alone = (
            f"not evaluated this round: {winner} already chose nodes to disrupt; it is looked at again next round"
            if winner
            else "nothing to do: it is not empty, not drifted, and no cheaper arrangement without it was found"
        )
        not_candidates = {c.name: self.why_not.get(c.name, left_alone) for c in self.candidates if c.name not in chosen}
        progress, consolidated = self._progress(bool(commands))
        return DisruptionPlan(tuple(commands), not_candidates, progress, self.reached, self.unreached, consolidated)

    def _progress(self, found: bool) -> tuple[Progress, bool]:
        """Where consolidation goes on next round, and whether it is consolidated: every
        candidate and every repacking window looked at since the last command, nothing found.
        A command starts the count again (the cluster changes); so does a finished cycle."""
        p = self.progress
        if self.recheck:
            return p, False
        single = self.next_resume if self.single_node_ran else p.single_node
        window = self.next_window if self.repacking_ran else p.repacking
        if found:
            return Progress(single, 0, window, 0), False
        looked = p.looked + self.reached
        repacked = p.repacked + self.windows_looked
        candidates, windows = self.single_node_candidates, self.windows
        single_done = candidates is not None and looked >= candidates
        if single_done and (not self.repacking or (windows is not None and repacked >= windows)):
            return Progress(single, 0, window, 0), True
        return Progress(single, looked, window, repacked), False

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline

    def _open(self, candidates: Iterable[Candidate]) -> list[Candidate]:
        """The candidates any voluntary method may look at: known pool, not already going away."""
        out = []
        for c in candidates:
            if c.disrupting:
                self.note(c, "already being disrupted: its replacement, drain or deletion is in progress")
            elif c.nodepool not in self.policies:
                self.note(c, f"NodePool {c.nodepool} is not known, so its disruption settings cannot be read")
            else:
                # Said up front, so a node no method reaches still says what holds it.
                if c.blocked_by or not c.initialized:
                    self.note(c, not_consolidatable(c, self.policies[c.nodepool], self.now) or "")
                out.append(c)
        return out

    # ------------------------------------------------------------------ 1. expiration

    def _expire(self) -> list[Command]:
        commands = []
        for c in self.candidates:
            # The claim's own expireAfter needs no NodePool (upstream's expiration controller
            # reads the NodeClaim alone), so a node whose NodePool is gone still expires.
            policy = self.policies.get(c.nodepool)
            # A node already disrupting is on its way out: a second command would only race the first.
            if c.disrupting or not expired(c, policy, self.now):
                continue
            text = (
                f"node {c.name} expired: created {duration(self.now - c.created_at)} ago, with expireAfter "
                f"{duration(expire_after(c, policy) or 0)}; deleted now without waiting for a replacement "
                f"(expiration is forceful: budgets and a node's do-not-disrupt do not apply)"
            )
            grace = grace_period(c, policy)
            if c.blocked_by:
                until = "until it gives way" if grace is None else f"for up to terminationGracePeriod {duration(grace)}"
                text += f"; {c.blocked_by}: the drain waits for it {until}"
            elif grace is not None:
                text += f"; its pods get up to {duration(grace)} to drain"
            if c.pods:
                text += f"; its {describe_pods(c)} will be provisioned anew"
            commands.append(Command(EXPIRED, (c.name,), (), 0.0, text, forceful=True))
        return commands

    # ------------------------------------------------------------------ 2. emptiness

    def _emptiness(self, open_: Sequence[Candidate]) -> list[Command]:
        budget = _Budget(self, EMPTY)
        chosen = []
        # The dearest first, so a tight budget removes the most expensive empty nodes.
        for c in sorted((c for c in open_ if c.empty), key=lambda c: (-c.price_per_hour, c.name)):
            why = not_consolidatable(c, self.policies[c.nodepool], self.now)
            if why:
                self.note(c, why)
            elif budget.take(c):
                chosen.append(c)
        if not chosen:
            return []
        savings = sum(c.price_per_hour for c in chosen)
        verb = "is" if len(chosen) == 1 else "are"
        text = f"{nodes_phrase(chosen)} {verb} empty: deleted without replacement: saves {money(savings)}/h"
        return [Command(EMPTY, tuple(c.name for c in chosen), (), savings, text)]

    # ------------------------------------------------------------------ 3. drift

    def _drift(self, open_: Sequence[Candidate]) -> list[Command]:
        static = self._static_drift(open_)
        if static:
            return static
        budget = _Budget(self, DRIFTED)
        drifted = []

        # Empty ones first, then the earliest drift (upstream sorts by the Drifted condition's time).
        def order(c: Candidate) -> tuple:
            return (not c.empty, c.drifted_at if c.drifted_at is not None else c.created_at, c.created_at, c.name)

        for c in sorted((c for c in open_ if c.drift_reason and not self.policies[c.nodepool].static), key=order):
            why = self._drift_blocked(c)
            if why:
                self.note(c, why, final=True)
            else:
                drifted.append(c)
        empties = [c for c in drifted if c.empty and budget.take(c)]
        if empties:
            reasons = ", ".join(sorted({c.drift_reason or "" for c in empties}))
            text = f"{nodes_phrase(empties)} drifted ({reasons}) and empty: deleted without replacement"
            savings = sum(c.price_per_hour for c in empties)
            return [Command(DRIFTED, tuple(c.name for c in empties), (), savings, f"{text}: saves {money(savings)}/h")]
        for c in drifted:
            if c.empty:
                continue  # its budget was exhausted: noted by take()
            if budget.left(c.nodepool) <= 0:
                self.note(c, budget.why_exhausted(c.nodepool), final=True)
                continue
            simulation = simulate([c], self.cluster, self.solve, leaving=self.leaving, uninitialized=self.uninitialized)
            if simulation.failure:
                self.note(c, f"drifted ({c.drift_reason}) but cannot be replaced now: {simulation.failure}", final=True)
                continue
            budget.take(c)
            return [self._drift_command(c, simulation.plan.claims)]
        return []

    def _static_drift(self, open_: Sequence[Candidate]) -> list[Command]:
        """Upstream's StaticDrift: a static NodePool's drifted nodes, each replaced one for one
        by a claim of its template (no simulation), within its Drifted budget and limits.nodes,
        and none while the pool runs more nodes than its replicas (``disruption.static``)."""
        budget = _Budget(self, DRIFTED)
        statics = {s.pool.name: s for s in self.cluster.static_nodepools}
        by_pool: dict[str, list[Candidate]] = {}

        def order(c: Candidate) -> tuple:
            return (c.drifted_at if c.drifted_at is not None else c.created_at, c.created_at, c.name)

        for c in sorted((c for c in open_ if c.drift_reason and self.policies[c.nodepool].static), key=order):
            why = self._drift_blocked(c)
            if why:
                self.note(c, why, final=True)
            elif c.nodepool not in statics:
                why = f"drifted ({c.drift_reason}) but NodePool {c.nodepool} offers nothing to launch"
                self.note(c, why, final=True)
            else:
                by_pool.setdefault(c.nodepool, []).append(c)
        commands = []
        for name, drifted in sorted(by_pool.items()):
            pool = statics[name]
            count = self._static_count(name)
            if self.recheck:
                # The command holds the room it was planned with (its pool's other commands,
                # started since, count it as theirs): only its node and budget are asked again.
                granted, why = min(budget.left(name), len(drifted)), "its Drifted budget allows no more disruptions now"
            else:
                granted, why = drift_replacements(
                    pool.replicas, count, node_limit(pool.pool.limits), budget.left(name), len(drifted)
                )
            claim = template_claim(pool.pool) if granted else None
            if granted and claim is None:
                granted, why = 0, unlaunchable(pool.pool)
            for c in drifted[:granted]:
                budget.take(c)
                commands.append(self._static_drift_command(c, claim))  # type: ignore[arg-type]
            for c in drifted[granted:]:
                self.note(c, f"drifted ({c.drift_reason}) but not replaced now: {why or 'budget or limit'}", final=True)
        return commands

    def _static_count(self, pool: str) -> PoolCount:
        """A static NodePool's claims: its nodes (those being disrupted pending disruption) and its
        claims in flight (in the snapshot as nodes that are no candidates: not registered yet)."""
        members = self.pool_nodes.get(pool, [])
        names = {c.name for c in members}
        in_flight = sum(1 for n in self.cluster.nodes if n.labels.get(NODEPOOL) == pool and n.name not in names)
        disrupting = sum(1 for c in members if c.disrupting)
        return PoolCount(running=len(members) - disrupting + in_flight, pending_disruption=disrupting)

    def _static_drift_command(self, c: Candidate, claim: ClaimPlan) -> Command:
        replacement = replace(claim, name=f"{c.nodepool}-replacement")
        chosen = replacement.chosen
        moving = "" if not c.pods else f"; its {describe_pods(c)} move"
        text = (
            f"{nodes_phrase([c])} drifted ({c.drift_reason}): replaced one for one, as NodePool {c.nodepool} is "
            f"static, by a new node of its template ({chosen.instance_type} {chosen.capacity_type} "
            f"{money(chosen.price)}/h){moving}"
        )
        return Command(DRIFTED, (c.name,), (replacement,), c.price_per_hour - chosen.price, text)

    def _drift_blocked(self, c: Candidate) -> str | None:
        policy = self.policies[c.nodepool]
        if not c.initialized:
            return "not initialized yet: only initialized nodes are disrupted"
        # A terminationGracePeriod bounds how long pods may hold a drifted node, so pod-level
        # blocks (do-not-disrupt pods, PDBs) give way; the node's own annotation never does.
        overridden = c.blocked_by_pods_only and grace_period(c, policy) is not None
        if c.blocked_by and not overridden:
            return f"drifted ({c.drift_reason}) but disruption is blocked: {c.blocked_by}"
        return None

    def _drift_command(self, c: Candidate, claims: Sequence[ClaimPlan]) -> Command:
        worst = sum(worst_launch_price(claim, self.pools) for claim in claims)
        if claims:
            shapes = ", ".join(
                f"{claim.chosen.instance_type} {claim.chosen.capacity_type} {money(claim.price)}/h" for claim in claims
            )
            moves = f"replaced by {plural(len(claims), 'new node')} ({shapes}; at most {money(worst)}/h)"
        else:
            moves = "its pods fit on the other nodes: deleted without replacement"
        moving = "its pod moves" if len(c.pods) == 1 else f"its {describe_pods(c)} move"
        text = f"{nodes_phrase([c])} drifted ({c.drift_reason}): {moves}; {moving}"
        if c.blocked_by:
            grace = duration(grace_period(c, self.policies[c.nodepool]) or 0)
            text += f"; {c.blocked_by} gives way after terminationGracePeriod {grace}"
        return Command(DRIFTED, (c.name,), tuple(claims), c.price_per_hour - worst, text)

    # ------------------------------------------------------------------ 4, 5. consolidation

    def _consolidatable(self, open_: Sequence[Candidate]) -> list[Candidate]:
        """Candidates for multi- and single-node consolidation, sorted; the others are noted.

        Empty nodes are left to emptiness, so the Empty budget alone governs them (upstream's
        single-node pass skips them too).
        """
        out = []
        for c in (c for c in open_ if not c.empty):
            policy = self.policies[c.nodepool]
            why = not_consolidatable(c, policy, self.now) or c.unconsolidatable
            if why is None and not policy.consolidates_underutilized:
                why = (
                    f"NodePool {policy.name} has consolidationPolicy {policy.consolidation_policy}: only empty "
                    f"nodes are removed, and this one runs {describe_pods(c)}"
                )
            if why:
                self.note(c, why)
            else:
                out.append(c)
        return consolidation_order(out)

    def _multi_node(self, open_: Sequence[Candidate]) -> list[Command]:
        budget = _Budget(self, UNDERUTILIZED)
        batch: list[Candidate] = []
        for c in self._consolidatable(open_):
            if len(batch) == MAX_MULTI_NODE_CANDIDATES:
                break
            if budget.take(c):
                batch.append(c)
        if self.recheck and len(batch) > 1:
            whole = self._consolidate(batch, multi_node=True)
            if isinstance(whole, Command):
                return [whole]
        # Upstream's binary search over prefix sizes 2..n: a prefix that consolidates raises the
        # floor, one that does not lowers the ceiling; the largest that worked wins.
        best: Command | None = None
        low, high = 1, len(batch) - 1
        while low <= high and not (best is not None and self.out_of_time()):
            middle = (low + high) // 2
            result = self._consolidate(batch[: middle + 1], multi_node=True)
            if isinstance(result, Command):
                best, low = result, middle + 1
            else:
                high = middle - 1
        return [best] if best else []

    def _single_node(self, open_: Sequence[Candidate]) -> list[Command]:
        budget = _Budget(self, UNDERUTILIZED)
        ordered = interleave_pools(self._consolidatable(open_))
        self.single_node_candidates = len(ordered)
        if self.settled():
            # Nothing new to say until the cluster changes (upstream skips a consolidated
            # cluster too): this round's time goes to repacking, which goes on after it.
            for c in ordered:
                self.note(c, SETTLED)
            return []
        self.single_node_ran = True
        start = self.progress.single_node % len(ordered) if ordered else 0
        for step, c in enumerate(ordered[start:] + ordered[:start]):
            if step and self.out_of_time():
                # Upstream times single-node consolidation out too; here the next round goes on
                # from this candidate, so each is looked at in turn.
                self.next_resume = (start + step) % len(ordered)
                self.reached, self.unreached = step, len(ordered) - step
                why = (
                    f"not evaluated this round: consolidation's {duration(self.budget_seconds or 0)} ran out; "
                    "it is looked at next round"
                )
                for rest in (ordered[start:] + ordered[:start])[step:]:
                    self.note(rest, why)
                return []
            if budget.left(c.nodepool) <= 0:
                self.note(c, budget.why_exhausted(c.nodepool))
                continue
            wait = 0.0 if self.recheck else recheck_backoff(c, self.now)
            if wait > 0:
                # A karpweb addition: upstream plans it again at once (see ``recheck_backoff``).
                since = duration(self.now - max(c.recheck_cancelled))
                why = (
                    f"its consolidation was cancelled on its re-check {since} ago (the cluster changed under "
                    f"the plan): looked at again in {duration(wait)}"
                )
                self.note(c, why)
                continue
            result = self._consolidate([c], multi_node=False)
            if isinstance(result, Command):
                self.reached = step + 1
                return [result]
            self.note(c, f"cannot be consolidated: {result}")
        self.reached = len(ordered)
        return []

    def _simulate(self, move: Sequence[Candidate], *, optimize: bool, cluster: Snapshot | None = None):
        """A consolidation's simulation: the nodes leaving go too, no moved pod lands on a node
        not yet initialized or still inside its consolidateAfter, minValues never relaxed."""
        return simulate(
            move,
            self.cluster if cluster is None else cluster,
            self.solve,
            leaving=self.leaving,
            uninitialized=self.uninitialized,
            optimize=optimize,
            closed=self.cooling,
            strict_min_values=True,
        )

    def _consolidate(self, move: Sequence[Candidate], *, multi_node: bool) -> Command | str:
        """Upstream's ``computeConsolidation``: a delete or a single cheaper replacement for
        ``move``, or why neither is possible."""
        # Packed as upstream packs (each new NodeClaim filled as far as the largest type allows):
        # the cost-optimized packing may split the pods over several smaller nodes, and
        # consolidation only ever replaces with one.
        simulation = self._simulate(move, optimize=False)
        if simulation.failure:
            return simulation.failure
        claims = simulation.plan.claims
        if len(claims) > 1:
            return f"the pods would need {len(claims)} new nodes; consolidation replaces with at most one"
        source = sum(c.price_per_hour for c in move)
        replacements: tuple[ClaimPlan, ...] = ()
        worst = 0.0
        if claims:
            priced = price_replacement(
                claims[0], move, self.pools, spot_to_spot=self.spot_to_spot, multi_node=multi_node
            )
            if isinstance(priced, str):
                return priced
            replacements, worst = (priced.claim,), priced.worst_price
        verdicts = balanced.scores(move, source - worst, self.pool_nodes, self.policies)
        refusal = balanced.refusal(verdicts)
        if refusal:
            return refusal
        if replacements:
            claim = replacements[0]
            others = len({o.instance_type for o in claim.options}) - 1
            alternatives = f" (or {plural(others, 'other type')})" if others else ""
            outcome = (
                f"1 {claim.chosen.instance_type} {claim.chosen.capacity_type}{alternatives} at most {money(worst)}/h"
            )
        else:
            whose = "its" if len(move) == 1 else "their"
            outcome = f"deleted: {whose} pods fit on the other nodes"
        text = f"{nodes_phrase(move)} → {outcome}: saves {money(source - worst)}/h"
        return Command(
            UNDERUTILIZED,
            tuple(c.name for c in move),
            replacements,
            source - worst,
            text,
            scores=tuple(verdicts.items()),
        )

    # ------------------------------------------------------------------ 6. repacking (karpweb's)

    def settled(self) -> bool:
        """Single-node consolidation looked at every candidate since the last command (over the
        rounds: ``Progress``) and found nothing."""
        looked, candidates = self.progress.looked, self.single_node_candidates
        return not self.recheck and candidates is not None and 0 < candidates <= looked

    def _repack(self, open_: Sequence[Candidate]) -> list[Command]:
        """The windows (``_windows``) packed anew with THE solver in turn, from where the last
        round stopped, while time is left; in a round that is repacking's turn (``settled``),
        the first window even without."""
        if not self.repacking or self.unreached or (self.out_of_time() and not self.settled()):
            return []  # (or single-node consolidation has not looked at every candidate yet)
        windows = self._windows(open_)
        self.windows = len(windows)
        if not windows:
            return []
        self.repacking_ran = True
        start = self.progress.repacking % len(windows)
        for step, group in enumerate(windows[start:] + windows[:start]):
            if step and self.out_of_time():
                self.next_window, self.windows_looked = (start + step) % len(windows), step
                return []
            command = self._repack_group(group)
            if command is not None:
                self.next_window, self.windows_looked = (start + step + 1) % len(windows), step + 1
                return [command]
        self.next_window, self.windows_looked = start, len(windows)
        return []

    def _windows(self, open_: Sequence[Candidate]) -> list[Sequence[Candidate]]:
        """Per NodePool, its candidates in consolidation order (those backing off after a
        cancelled re-check left out), as many at a time as its budget allows and
        ``REPACK_MAX_NODES`` at most."""
        budget = _Budget(self, UNDERUTILIZED)
        by_pool: dict[str, list[Candidate]] = {}
        for c in self._consolidatable(open_):
            if not self.recheck and recheck_backoff(c, self.now) > 0:
                continue
            by_pool.setdefault(c.nodepool, []).append(c)
        windows: list[Sequence[Candidate]] = []
        for pool, members in sorted(by_pool.items()):
            size = min(budget.left(pool), REPACK_MAX_NODES)
            if size >= 2:
                windows += [members[i : i + size] for i in range(0, len(members) - 1, size)]
        return [group for group in windows if len(group) > 1]

    def _repack_group(self, group: Sequence[Candidate]) -> Command | None:
        cluster = self.cluster
        if self.deadline is not None:
            # The packing keeps to the round's time: pods it does not reach fail the move.
            left = max(MIN_REPACK_SECONDS, self.deadline - time.perf_counter())
            cluster = replace(cluster, deadline_seconds=min(cluster.deadline_seconds, left))
        simulation = self._simulate(group, optimize=True, cluster=cluster)
        claims = simulation.plan.claims
        if simulation.failure or len(claims) >= len(group):
            return None  # a repacking leaves fewer nodes than it removes
        priced = price_each(claims, group, self.pools, spot_to_spot=self.spot_to_spot)
        if isinstance(priced, str):
            return None
        source = sum(c.price_per_hour for c in group)
        worst = sum(p.worst_price for p in priced)
        savings = source - worst
        if savings < REPACK_MIN_SAVINGS * source:
            return None
        verdicts = balanced.scores(group, savings, self.pool_nodes, self.policies)
        if balanced.refusal(verdicts):
            return None
        replacements = tuple(p.claim for p in priced)
        shapes = Counter(f"{claim.chosen.instance_type} {claim.chosen.capacity_type}" for claim in replacements)
        new = ", ".join(f"{n}× {shape}" if n > 1 else shape for shape, n in shapes.items())
        onto = f" and {plural(len(replacements), 'new node')} ({new}) at most {money(worst)}/h" if replacements else ""
        text = (
            f"{nodes_phrase(group)} → repacked onto the other nodes{onto}: saves {money(savings)}/h "
            f"({savings / source:.0%}; their pods packed together, which no one node's move finds)"
        )
        return Command(
            UNDERUTILIZED, tuple(c.name for c in group), replacements, savings, text, scores=tuple(verdicts.items())
        )

"""The acknowledgement tracker against a model, over random sequences (Hypothesis).

Whatever the application and the broker do, in any order: a delivery is sent with a
final type (ACCEPT, RELEASE, REJECT, GAP) at most once, nothing is sent that was not
acknowledged, a record is in at most one request at a time, a RENEW never shares a
request with a final type, and the tracker's refusals are exactly the model's.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from aiogroup._fetch.share_acknowledgements import (
    AcknowledgementTracker,
    Acquisition,
    InvalidAcknowledgement,
)
from aiogroup._protocol.share_types import AcknowledgeType

T = AcknowledgeType
TP = ("t", 0)
FINAL = {T.ACCEPT, T.RELEASE, T.REJECT, T.GAP}


class TrackerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tr = AcknowledgementTracker(explicit=True)
        self.now = 0.0
        self.next_offset = 0
        self.session = 0
        #: acquisition id -> model state: "buffered", "handed", "pending", "sent", "done".
        self.state: dict[int, str] = {}
        self.kind: dict[int, int] = {}
        self.acqs: dict[int, Acquisition] = {}
        self.finals_sent: dict[int, int] = {}
        self.tokens: dict[int, dict[int, int]] = {}  # token -> {acq id: type}
        self.offset_of: dict[int, int] = {}

    def _by_offset(self, offset: int) -> int | None:
        for aid, o in self.offset_of.items():
            if o == offset and self.state[aid] != "done":
                return aid
        return None

    @rule()
    def acquire(self) -> None:
        offset = self.next_offset
        self.next_offset += 1
        acq = self.tr.acquired(TP, offset, 1, self.now + 30.0, session=self.session)
        self.acqs[acq.id] = acq
        self.state[acq.id] = "buffered"
        self.offset_of[acq.id] = offset

    @rule(data=st.data())
    def hand_out(self, data: st.DataObject) -> None:
        buffered = [a for a, s in self.state.items() if s == "buffered"]
        if not buffered:
            return
        aid = data.draw(st.sampled_from(buffered))
        assert self.tr.hand_out(self.acqs[aid], self.now)
        self.state[aid] = "handed"

    @rule(data=st.data(), kind=st.sampled_from([T.ACCEPT, T.RELEASE, T.REJECT, T.RENEW]))
    def acknowledge(self, data: st.DataObject, kind: T) -> None:
        if not self.acqs:
            return
        aid = data.draw(st.sampled_from(sorted(self.acqs)))
        state, owed = self.state[aid], self.kind.get(aid)
        # Behind a RENEW, one final type may follow; a second is a second acknowledgement.
        renewing = state in ("pending", "sent") and owed == T.RENEW and -aid not in self.kind
        allowed = state == "handed" or renewing
        try:
            self.tr.acknowledge(self.acqs[aid], kind)
        except InvalidAcknowledgement:
            assert not allowed, (state, owed, kind)
            return
        assert allowed, (state, owed, kind)
        if renewing and kind == T.RENEW:
            return
        if state == "sent":  # a final type behind a RENEW in flight: sent after it
            self.kind[-aid] = kind
            return
        self.state[aid], self.kind[aid] = "pending", kind

    @rule(renew=st.booleans())
    def take(self, renew: bool) -> None:
        token, batches = self.tr.take(None, now=self.now, lock_ms=30_000, renew=renew)
        sent: dict[int, int] = {}
        for tp, bs in batches.items():
            assert tp == TP
            for b in bs:
                for offset in range(b.first_offset, b.last_offset + 1):
                    kind = b.type_at(offset)
                    assert (kind == T.RENEW) == renew
                    aid = self._by_offset(offset)
                    assert aid is not None
                    assert self.state[aid] == "pending", (offset, self.state[aid])
                    assert self.kind[aid] == kind
                    sent[aid] = kind
                    self.state[aid] = "sent"
                    if kind in FINAL:
                        self.finals_sent[aid] = self.finals_sent.get(aid, 0) + 1
        expected = {a for a, s in self.state.items() if s == "sent" and a not in self._in_tokens()}
        assert set(sent) == expected
        if sent:
            self.tokens[token] = sent

    def _in_tokens(self) -> set[int]:
        return {a for t in self.tokens.values() for a in t}

    @precondition(lambda self: bool(self.tokens))
    @rule(data=st.data(), ok=st.booleans())
    def answer(self, data: st.DataObject, ok: bool) -> None:
        token = data.draw(st.sampled_from(sorted(self.tokens)))
        sent = self.tokens.pop(token)
        errors = {} if ok else {TP: (121, "INVALID_RECORD_STATE")}
        self.tr.answered(token, errors)
        for aid, kind in sent.items():
            if self.state[aid] != "sent":
                continue
            if kind == T.RENEW and ok:
                later = self.kind.pop(-aid, None)
                if later is not None:
                    self.state[aid], self.kind[aid] = "pending", later
                else:
                    self.state[aid], self.kind[aid] = "handed", None  # type: ignore[assignment]
            else:
                self.state[aid] = "done"
                self.kind.pop(-aid, None)

    @rule()
    def drop_session(self) -> None:
        self.tr.drop_session(self.session, "reopened")
        for aid, s in self.state.items():
            self.state[aid] = "done" if s != "done" else s
        self.tokens.clear()
        self.session += 1

    @invariant()
    def a_delivery_is_settled_once(self) -> None:
        assert all(n <= 1 for n in self.finals_sent.values())

    @invariant()
    def held_matches_the_model(self) -> None:
        assert self.tr.held() == sum(1 for s in self.state.values() if s != "done")


TestTrackerModel = TrackerModel.TestCase

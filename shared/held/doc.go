// Package held is the room of the held outcomes (api.HeldOutcomes):
// items that wait, neither settled nor failed, for a next move of their
// own. It keeps what the engines share about them, so that none of the
// engines imports another:
//
//   - where a held unit's message waits (Save, MessageKey): a held item
//     has no message on the items queue, so the item function keeps its
//     unit's message under the batch's held/ prefix before it records the
//     item held, and a wake sends it again;
//   - the wakes (Waker): the lift of a halt (every item withheld under
//     its subject), a raise of the per-item ceilings (Raise: every item
//     exhausted whose totals are now under them), a cancel (every held
//     item, to settle cancelled). A wake is a conditional
//     write per item (Store.WakeItem on an item row, a take of its pack
//     row) and the unit's saved message sent again; the item function
//     then runs (or settles) exactly the woken items, once per wake,
//     whatever the queue delivers twice (ledger.Plan);
//   - when an attempt ends an item exhausted (Exhaust, Reached): its
//     run's totals reached a per-item ceiling (api.Ceilings) with an
//     attempt that would have been retried;
//   - the next move of each held item, in words (api.NextMove).
//
// An item moves:
//
//	in_flight ──credential refused──▶ withheld ──lift───▶ in_flight (next attempt)
//	                                  withheld ──cancel─▶ cancelled
//	in_flight ──ceiling reached─────▶ exhausted ──raise──▶ in_flight (next attempt)
//	                                  exhausted ──cancel─▶ cancelled
//
// A run with a held item stays running: finalize finishes a run only
// when every item ended. docs/design/items.md, "Withheld items" and
// "Exhausted items", has the details.
//
// The package imports no AWS type and no engine: it declares the store
// methods it uses (Store), which internal/dynamo and the in-memory store
// implement.
package held

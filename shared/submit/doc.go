// Package submit is the submit engine: a request becomes a batch with a
// frozen manifest and a started fan-out. Submitter.Submit reads the
// source in the call (inline items, uploads, schedules);
// Submitter.Accept answers at once and hands the read to a background
// invocation (Submitter.Complete), a large JSON Lines or CSV object read
// by parallel parts (Submitter.Part); Submitter.TickSubmitting hands off
// reads that died. Resume and Correct start a new run of a finished batch
// (of the whole manifest, or of corrected items, a new revision);
// ClaimUpload keeps a renamed copy of an upload from running twice.
//
// One id, one plan: the batch row is created only if the id is new; the
// same request again is the same batch, another plan under the id is
// refused (api.ErrBatchMismatch). Bad input refuses the batch with the
// line, key or field, before any item runs.
//
// It declares the store methods it uses (Store) and imports no other
// engine and no AWS SDK.
package submit

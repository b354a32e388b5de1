// Package pace holds bulkrun's pacing rules: how a batch's calls to its
// downstream are spaced, apart from what the calls do. It is pure (the
// standard library only): the item engine (shared/worker) applies the
// rules, and the state they keep across invocations lives behind the
// ports the engine declares, which internal/dynamo implements.
//
// Concurrency by schedule (tracks.go). A batch with max_concurrency N
// runs on at most N tracks: each track is one items-queue message that
// runs its units one after another, and takes the next slice of the
// manifest (SliceSize: up to SliceUnits units, whole packs, at least
// SlicesPerTrack slices per track in a small run) from a claim counter
// of its run when its slice is done (one counter per TracksPerCounter
// tracks; a track whose counter is drained moves on to the next). No
// unit waits on the queue for a slot: the units not yet started are
// lines of the manifest, which cost nothing while they wait, and a track
// starts the next one as soon as its unit ends. A counter takes one
// write of one unit per slice, so its row stays under DynamoDB's 1,000
// write units a second at any size and limit (ClaimWritesPerSecond;
// "Burst and adaptive capacity", DynamoDB developer guide: 1,000 write
// units a second per partition).
//
// Rates per downstream key (rate.go): a GCRA schedule per bucket row,
// leased one unit's calls at a time, booked ahead up to LeaseHorizon;
// a row paces at most ShardRequestsPerSecond.
//
// Adaptive pace (adapt.go): a key with no rate is paced once its
// downstream throttles a call, at a limit cut by AdaptBackoff on each
// throttled call and grown by its Step a second, held until the
// downstream's Retry-After.
package pace

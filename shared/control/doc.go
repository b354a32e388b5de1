// Package control carries out a caller's commands on existing batches and
// the retention: Control.Get, Cancel, Pause, Unpause, Release, Forget, the
// listing of items needing attention (Items) and of batches
// (ListBatches), and Sweeper.RunOnce, which forgets the batches whose
// retention ended, oldest first.
//
// It declares the store methods it uses (Store) and imports no other
// engine and no AWS SDK.
package control

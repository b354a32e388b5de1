package ledger

import (
	"errors"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
)

// TestExpired guards the product line "expiry is compared with now on
// every read and submit": a finished batch is expired from its ExpiresAt
// on; a running batch, or one without a retention, never is.
func TestExpired(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		b    Batch
		want bool
	}{
		{"finished, retention ended", Batch{Batch: api.Batch{Status: api.StatusCompleted, ExpiresAt: now.Add(-time.Second)}}, true},
		{"finished, retention ends now", Batch{Batch: api.Batch{Status: api.StatusThresholdExceeded, ExpiresAt: now}}, true},
		{"finished, retention not ended", Batch{Batch: api.Batch{Status: api.StatusCancelled, ExpiresAt: now.Add(time.Millisecond)}}, false},
		{"running again after an expiry time was set", Batch{Batch: api.Batch{Status: api.StatusRunning, ExpiresAt: now.Add(-time.Hour)}}, false},
		{"finished without retention", Batch{Batch: api.Batch{Status: api.StatusCompleted}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.Expired(now); got != tt.want {
				t.Fatalf("Expired = %v, want %v", got, tt.want)
			}
			_, err := Live(tt.b, now)
			if errors.Is(err, api.ErrExpired) != tt.want {
				t.Fatalf("Live error %v, want expired %v", err, tt.want)
			}
		})
	}
}

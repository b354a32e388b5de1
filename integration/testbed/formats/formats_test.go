package formats_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/formats"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// TestGoldenMessages guards the items-queue message formats of every
// version: each golden message (fan-out, item inline and by pointer,
// pack; from version 2 a max_concurrency track) of testdata/v0 (the release before versions), of every version
// since and of today's decodes into its Go type with no unknown field and encodes
// back to the same JSON (an old message keeps its version 0 on the way);
// today's carry "v": ledger.FormatVersion, and every message the scenario
// leaves on the queue decodes and validates.
func TestGoldenMessages(t *testing.T) {
	for v := range ledger.FormatVersion + 1 {
		dir := filepath.Join("testdata", fmt.Sprintf("v%d", v))
		for name, typ := range map[string]any{"message-fanout": ledger.Message{}, "message-item": ledger.Message{},
			"message-item-ref": ledger.Message{}, "message-pack": ledger.PackMessage{}, "message-track": ledger.Message{}} {
			if name == "message-track" && v < 2 {
				continue // tracks came with version 2's rows
			}
			t.Run(fmt.Sprintf("v%d/%s", v, name), func(t *testing.T) {
				golden, err := os.ReadFile(filepath.Join(dir, name+".json"))
				if err != nil {
					t.Fatal(err)
				}
				p := reflect.New(reflect.TypeOf(typ))
				dec := json.NewDecoder(bytes.NewReader(golden))
				dec.DisallowUnknownFields()
				if err := dec.Decode(p.Interface()); err != nil {
					t.Fatalf("decode: %v", err)
				}
				if got := int(p.Elem().FieldByName("Format").Int()); got != v {
					t.Errorf("format %d, want %d", got, v)
				}
				out, err := json.Marshal(p.Interface())
				if err != nil {
					t.Fatal(err)
				}
				var a, b any
				_ = json.Unmarshal(golden, &a)
				_ = json.Unmarshal(out, &b)
				if v == 0 {
					delete(b.(map[string]any), "v") // version 0 wrote none
				}
				if !reflect.DeepEqual(a, b) {
					t.Errorf("round trip changed the message:\n golden %s\n   again %s", bytes.TrimSpace(golden), out)
				}
			})
		}
		sc, err := formats.ReadScenario(dir)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range sc.Messages {
			var head struct {
				Format int                `json:"v"`
				Kind   ledger.MessageKind `json:"kind"`
			}
			if err := json.Unmarshal([]byte(m.Body), &head); err != nil || head.Format != v {
				t.Fatalf("v%d message %d: version %d (%v)", v, i, head.Format, err)
			}
			var verr error
			if head.Kind == ledger.KindPack {
				var pm ledger.PackMessage
				verr = json.Unmarshal([]byte(m.Body), &pm)
				if verr == nil {
					verr = pm.Validate()
				}
			} else {
				var im ledger.Message
				verr = json.Unmarshal([]byte(m.Body), &im)
				if verr == nil {
					verr = im.Validate()
				}
			}
			if verr != nil {
				t.Errorf("v%d message %d: %v", v, i, verr)
			}
		}
	}
}

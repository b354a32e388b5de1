package ledger

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
)

// fill sets every settable part of v to a value that is not its zero:
// variant 0 and 1 differ in every scalar (a bool is true in one, false in
// the other), so that one of them differs from any default a comparison
// may give the zero value (stop_on_threshold unset is true).
func fill(v reflect.Value, variant int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(strings.Repeat(string(rune('c'+variant)), 64)) // hex digits: a CheckPlan
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(7 + variant))
	case reflect.Float64:
		v.SetFloat(float64(7 + variant))
	case reflect.Bool:
		v.SetBool(variant == 0)
	case reflect.Pointer:
		e := reflect.New(v.Type().Elem())
		fill(e.Elem(), variant)
		v.Set(e)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Field(i).CanSet() {
				fill(v.Field(i), variant)
			}
		}
	case reflect.Map:
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, variant)
		fill(e, variant)
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 { // JSON bytes (pipeline options)
			v.SetBytes([]byte(`{"k":` + string(rune('1'+variant)) + `}`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), variant)
		v.Set(s)
	}
}

// hiddenPlanNames are the names a 409 gives the HiddenPlan fields (which
// have no JSON name); an api.Plan field is named by its JSON name.
var hiddenPlanNames = map[string]string{"TaskToken": "task_token", "TaskHeartbeat": "task_heartbeat_seconds", "CheckPlan": "schema"}

// planFields calls f with the 409 name of every field of api.Plan and
// HiddenPlan and a setter of that field alone on a Batch.
func planFields(t *testing.T, f func(name string, set func(b *Batch, variant int))) {
	t.Helper()
	for _, part := range []struct {
		typ reflect.Type
		of  func(b *Batch) reflect.Value
	}{
		{reflect.TypeFor[api.Plan](), func(b *Batch) reflect.Value { return reflect.ValueOf(&b.Plan).Elem() }},
		{reflect.TypeFor[HiddenPlan](), func(b *Batch) reflect.Value { return reflect.ValueOf(&b.HiddenPlan).Elem() }},
	} {
		for i := range part.typ.NumField() {
			sf := part.typ.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if name == "-" || name == "" {
				var ok bool
				if name, ok = hiddenPlanNames[sf.Name]; !ok {
					t.Errorf("%s.%s has no name for a 409: give it one in DiffPlan and in hiddenPlanNames", part.typ, sf.Name)
					continue
				}
			}
			f(name, func(b *Batch, variant int) { fill(part.of(b).Field(i), variant) })
		}
	}
}

// The plan cannot drift from its comparison: each field of api.Plan and
// HiddenPlan, set alone on the stored batch, is a difference DiffPlan
// names (by its JSON name, for a HiddenPlan field its 409 name), and the
// same value on both sides is none. A field added to the plan and not to
// DiffPlan fails here.
func TestDiffPlanNamesEveryPlanField(t *testing.T) {
	planFields(t, func(name string, set func(*Batch, int)) {
		reported := false
		for variant := range 2 {
			var stored, same Batch
			set(&stored, variant)
			set(&same, variant)
			if f, was, now := stored.DiffPlan(same); f != "" {
				t.Errorf("%s: the same value differs in %s (%s, %s)", name, f, was, now)
			}
			f, was, now := stored.DiffPlan(Batch{})
			switch {
			case f == name:
				reported = true
				if was == now {
					t.Errorf("%s: stored and given shown alike: %q", name, was)
				}
			case f != "":
				t.Errorf("%s set alone: DiffPlan names %s", name, f)
			}
		}
		if !reported {
			t.Errorf("%s: a stored value differing from none is not a difference of the plan (DiffPlan does not compare it)", name)
		}
	})
}

// DiffPlan reads the plan only: a repeated submit's other run, status,
// counts or bookkeeping are not another plan.
func TestDiffPlanIgnoresTheRest(t *testing.T) {
	var stored Batch
	for _, v := range []reflect.Value{reflect.ValueOf(&stored.Batch).Elem(), reflect.ValueOf(&stored).Elem()} {
		for i := range v.NumField() {
			switch v.Type().Field(i).Name {
			case "Batch", "Plan", "HiddenPlan":
				continue
			}
			fill(v.Field(i), 0)
		}
	}
	if f, was, now := stored.DiffPlan(Batch{}); f != "" {
		t.Fatalf("a field outside the plan differs: %s (%s, %s)", f, was, now)
	}
}

// The hidden plan stays out of every JSON of a batch: a task token is
// never shown.
func TestHiddenPlanNotInJSON(t *testing.T) {
	var b Batch
	fill(reflect.ValueOf(&b.HiddenPlan).Elem(), 0)
	out, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{b.TaskToken, "task_token", "task_heartbeat", "check_plan", "CheckPlan", "TaskToken"} {
		if strings.Contains(string(out), s) {
			t.Errorf("batch JSON holds %q: %s", s, out)
		}
	}
}

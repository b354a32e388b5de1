package layout

import (
	"reflect"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// fillPlan sets every settable part of v to a value that is not its zero.
func fillPlan(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(strings.Repeat("c", 64))
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Float64:
		v.SetFloat(7)
	case reflect.Bool:
		v.SetBool(false) // behind a pointer: not the zero pointer
	case reflect.Pointer:
		e := reflect.New(v.Type().Elem())
		fillPlan(e.Elem())
		v.Set(e)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() { // not a type's own bookkeeping (api.Rate's)
				fillPlan(v.Field(i))
			}
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillPlan(k)
		fillPlan(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Slice: // JSON bytes (pipeline options)
		v.SetBytes([]byte(`{"k":7}`))
	}
}

// The row stores the whole plan: every field of api.Plan and
// ledger.HiddenPlan, set, comes back from its row as it went in. A plan
// field added without its attribute fails here.
func TestBatchRowKeepsTheWholePlan(t *testing.T) {
	var b ledger.Batch
	b.ID = "b"
	fillPlan(reflect.ValueOf(&b.Plan).Elem())
	fillPlan(reflect.ValueOf(&b.HiddenPlan).Elem())
	for _, v := range []reflect.Value{reflect.ValueOf(b.Plan), reflect.ValueOf(b.HiddenPlan)} {
		for i := range v.NumField() {
			if v.Field(i).IsZero() {
				t.Fatalf("%s.%s not filled", v.Type(), v.Type().Field(i).Name)
			}
		}
	}
	r, err := ToBatchRow(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := FromBatchRow(r)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Plan, b.Plan) {
		t.Errorf("plan from the row:\n%+v\nwant\n%+v", got.Plan, b.Plan)
	}
	if got.HiddenPlan != b.HiddenPlan {
		t.Errorf("hidden plan from the row: %+v, want %+v", got.HiddenPlan, b.HiddenPlan)
	}
	if !reflect.DeepEqual(got.Plan.Clone(), b.Plan) {
		t.Error("a plan's clone differs from it")
	}
	var none api.Plan
	if c := none.Clone(); !reflect.DeepEqual(c, none) {
		t.Errorf("the clone of an empty plan is %+v", c)
	}
}

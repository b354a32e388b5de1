// Package eventschema checks bulkrun's Batch State Change events against
// their published JSON Schema, docs/events/batch-state-change.schema.json,
// held to exactly the fields it names: the schema leaves additional
// properties open for subscribers (version 1 only grows), and Strict
// closes every object that lists its properties, so that an event with a
// field the schema does not document fails as one missing a required
// field does. The unit tests and the integration suite use it.
package eventschema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// SchemaPath is the schema's path from the repository's root.
const SchemaPath = "docs/events/batch-state-change.schema.json"

// ExamplesPath holds one detail per change of version 1, as published;
// every later schema of version 1 must still accept each of them.
const ExamplesPath = "docs/events/batch-state-change.v1.examples.json"

// Root is the repository's root, found from this file's place.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Schema is the compiled schema, strict (see the package comment).
type Schema struct{ s *jsonschema.Schema }

// Load compiles the schema at SchemaPath with every object that lists
// properties closed (additionalProperties false) and formats asserted.
func Load() (*Schema, error) {
	raw, err := os.ReadFile(filepath.Join(Root(), SchemaPath))
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SchemaPath, err)
	}
	strict(doc)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(SchemaPath, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(SchemaPath)
	if err != nil {
		return nil, err
	}
	return &Schema{s}, nil
}

// strict sets additionalProperties false on every object schema under v
// that has properties and says nothing of others.
func strict(v any) {
	switch v := v.(type) {
	case map[string]any:
		if _, ok := v["properties"]; ok {
			if _, set := v["additionalProperties"]; !set {
				v["additionalProperties"] = false
			}
		}
		for k, c := range v {
			if k != "if" && k != "then" && k != "else" { // conditions name a few properties of the object, not all
				strict(c)
			}
		}
	case []any:
		for _, c := range v {
			strict(c)
		}
	}
}

// Validate checks one detail (its JSON) and returns the validator's
// error, which names the place and the rule that failed.
func (s *Schema) Validate(detail []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(detail))
	if err != nil {
		return err
	}
	return s.s.Validate(v)
}

// ValidateValue is Validate of v marshalled to JSON.
func (s *Schema) ValidateValue(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.Validate(b)
}

// Examples returns the published examples (ExamplesPath), each as JSON.
func Examples() ([]json.RawMessage, error) {
	raw, err := os.ReadFile(filepath.Join(Root(), ExamplesPath))
	if err != nil {
		return nil, err
	}
	var out []json.RawMessage
	return out, json.Unmarshal(raw, &out)
}

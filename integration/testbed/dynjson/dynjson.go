// Package dynjson reads and writes DynamoDB items as DynamoDB JSON, for
// golden files and tests. Not API.
package dynjson

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Row is one stored DynamoDB item in DynamoDB JSON, the format of the
// DynamoDB API and of its S3 exports ({"pk": {"S": "..."}, "n": {"N":
// "1"}, ...}; DynamoDB developer guide, "Data type descriptors",
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.LowLevelAPI.html#Programming.LowLevelAPI.DataTypeDescriptors).
type Row map[string]json.RawMessage

// EncodeRow writes item as DynamoDB JSON.
func EncodeRow(item map[string]types.AttributeValue) (Row, error) {
	r := Row{}
	for k, v := range item {
		b, err := json.Marshal(encodeAV(v))
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %w", k, err)
		}
		r[k] = b
	}
	return r, nil
}

// DecodeRow reads a DynamoDB JSON item.
func DecodeRow(r Row) (map[string]types.AttributeValue, error) {
	item := map[string]types.AttributeValue{}
	for k, raw := range r {
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("attribute %s: %w", k, err)
		}
		av, err := decodeAV(v)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %w", k, err)
		}
		item[k] = av
	}
	return item, nil
}

func encodeAV(v types.AttributeValue) map[string]any {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return map[string]any{"S": v.Value}
	case *types.AttributeValueMemberN:
		return map[string]any{"N": v.Value}
	case *types.AttributeValueMemberBOOL:
		return map[string]any{"BOOL": v.Value}
	case *types.AttributeValueMemberNULL:
		return map[string]any{"NULL": true}
	case *types.AttributeValueMemberB:
		return map[string]any{"B": base64.StdEncoding.EncodeToString(v.Value)}
	case *types.AttributeValueMemberSS:
		s := append([]string(nil), v.Value...)
		sort.Strings(s)
		return map[string]any{"SS": s}
	case *types.AttributeValueMemberNS:
		s := append([]string(nil), v.Value...)
		sort.Strings(s)
		return map[string]any{"NS": s}
	case *types.AttributeValueMemberL:
		l := make([]any, len(v.Value))
		for i, e := range v.Value {
			l[i] = encodeAV(e)
		}
		return map[string]any{"L": l}
	case *types.AttributeValueMemberM:
		m := map[string]any{}
		for k, e := range v.Value {
			m[k] = encodeAV(e)
		}
		return map[string]any{"M": m}
	}
	return map[string]any{"?": fmt.Sprintf("%T", v)}
}

func decodeAV(v map[string]any) (types.AttributeValue, error) {
	if len(v) != 1 {
		return nil, fmt.Errorf("want one type descriptor, got %d", len(v))
	}
	for t, x := range v {
		switch t {
		case "S":
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("descriptor S holds a %T", x)
			}
			return &types.AttributeValueMemberS{Value: s}, nil
		case "N":
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("descriptor N holds a %T", x)
			}
			return &types.AttributeValueMemberN{Value: s}, nil
		case "BOOL":
			b, ok := x.(bool)
			if !ok {
				return nil, fmt.Errorf("descriptor BOOL holds a %T", x)
			}
			return &types.AttributeValueMemberBOOL{Value: b}, nil
		case "NULL":
			return &types.AttributeValueMemberNULL{Value: true}, nil
		case "B":
			s, _ := x.(string)
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, err
			}
			return &types.AttributeValueMemberB{Value: b}, nil
		case "SS", "NS":
			l, _ := x.([]any)
			s := make([]string, len(l))
			for i, e := range l {
				s[i], _ = e.(string)
			}
			if t == "SS" {
				return &types.AttributeValueMemberSS{Value: s}, nil
			}
			return &types.AttributeValueMemberNS{Value: s}, nil
		case "L":
			l, _ := x.([]any)
			out := make([]types.AttributeValue, len(l))
			for i, e := range l {
				m, _ := e.(map[string]any)
				av, err := decodeAV(m)
				if err != nil {
					return nil, fmt.Errorf("list element %d: %w", i, err)
				}
				out[i] = av
			}
			return &types.AttributeValueMemberL{Value: out}, nil
		case "M":
			m, _ := x.(map[string]any)
			out := map[string]types.AttributeValue{}
			for k, e := range m {
				em, _ := e.(map[string]any)
				av, err := decodeAV(em)
				if err != nil {
					return nil, fmt.Errorf("map member %s: %w", k, err)
				}
				out[k] = av
			}
			return &types.AttributeValueMemberM{Value: out}, nil
		}
		return nil, fmt.Errorf("unknown type descriptor %q", t)
	}
	return nil, nil
}

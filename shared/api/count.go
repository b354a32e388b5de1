package api

import (
	"strconv"
	"strings"
)

// Count is n and noun in words, singular for 1 and plural otherwise:
// Count(1, "item") is "1 item", Count(3, "failure") "3 failures",
// Count(0, "batch") "0 batches". noun is a singular English noun (or a
// phrase ending in one: "corrected item"); Plural makes the plural.
// Every text bulkrun writes for a person counts with it.
func Count[N ~int | ~int64](n N, noun string) string {
	return strconv.FormatInt(int64(n), 10) + " " + Noun(n, noun)
}

// Noun is noun as n of it are called: singular for 1, else Plural.
func Noun[N ~int | ~int64](n N, noun string) string {
	if n == 1 {
		return noun
	}
	return Plural(noun)
}

// Plural is the plural of a singular English noun, or of a phrase ending
// in one: "item" → "items", "batch" → "batches", "entry" → "entries".
func Plural(noun string) string {
	switch {
	case strings.HasSuffix(noun, "s"), strings.HasSuffix(noun, "x"), strings.HasSuffix(noun, "ch"), strings.HasSuffix(noun, "sh"):
		return noun + "es"
	case strings.HasSuffix(noun, "y") && len(noun) > 1 && !strings.ContainsRune("aeiou", rune(noun[len(noun)-2])):
		return noun[:len(noun)-1] + "ies"
	}
	return noun + "s"
}

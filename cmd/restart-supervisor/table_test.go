package main

import (
	"bytes"
	"strings"
	"testing"
	"text/tabwriter"
)

// TestWriteTableMatchesTabwriter holds writeTable to the text/tabwriter
// layout the status table had: rows of equal cell count, wide and empty
// cells, multi-byte runes.
func TestWriteTableMatchesTabwriter(t *testing.T) {
	for _, rows := range [][][]string{
		{{"CONTAINER", "STATE", "RESTARTS"}},
		{{"A", "B", "C"}, {"app", "running", "2"}, {"a-much-longer-name", "backoff (10s)", "12345"}},
		{{"", "", ""}, {"x", "", "last cell is never padded"}},
		{{"ünï", "çødé", "→"}, {"ascii", "日本語", "z"}},
		{{"only"}, {"one column"}},
	} {
		var want bytes.Buffer
		tw := tabwriter.NewWriter(&want, 0, 8, 2, ' ', 0)
		for _, r := range rows {
			tw.Write([]byte(strings.Join(r, "\t") + "\n"))
		}
		tw.Flush()
		var got bytes.Buffer
		if err := writeTable(&got, rows); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("rows %q:\n got %q\nwant %q", rows, got.String(), want.String())
		}
	}
}

package manifests

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"
)

// TestInjectStreamMatchesManifests: the streaming path writes what
// InjectManifests and WriteTo write, for every golden input, also read a
// byte at a time; and reports the same objects and errors.
func TestInjectStreamMatchesManifests(t *testing.T) {
	inj, _ := goldenInjector(t)
	inputs := goldenInputs(t)
	for _, in := range inputs {
		src, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		want, wantReports := injectBytes(t, inj, src)
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(src)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			var out bytes.Buffer
			var reports []ObjectReport
			err := InjectStream(context.Background(), inj, r, &out, func(d *Document, rs []ObjectReport) {
				reports = append(reports, rs...)
			})
			if err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("%s (one byte at a time: %v): stream output differs:\n%s", in, oneByte, lineDiff(string(want), out.String()))
			}
			if len(reports) != len(wantReports) {
				t.Errorf("%s: %d reports, want %d", in, len(reports), len(wantReports))
			}
		}
	}
}

// TestReaderSplits: documents, separators and lines as the stream has
// them, in the cases where the format is decided along the way.
func TestReaderSplits(t *testing.T) {
	for _, tc := range []struct {
		in    string
		seps  []string
		raws  []string
		lines []int
	}{
		{"", []string{""}, []string{""}, []int{1}},
		{"---\n", []string{"", "---\n"}, []string{"", ""}, []int{1, 2}},
		{"a: 1\n--- # c\nb: 2", []string{"", "--- # c\n"}, []string{"a: 1\n", "b: 2"}, []int{1, 3}},
		{"\n {\"a\":1}\n\n[1]  ", []string{"\n ", "\n\n", "  "}, []string{`{"a":1}`, "[1]", ""}, []int{2, 4, 4}},
		// Flow-style YAML that starts like JSON.
		{"  {a: 1}\n---\n{b: 2}\n", []string{"", "---\n"}, []string{"  {a: 1}\n", "{b: 2}\n"}, []int{1, 3}},
		// JSON, then something else: YAML from there on.
		{"{\"a\":1}\n---\n{b: 2}\n", []string{"", "", "---\n"}, []string{`{"a":1}`, "\n", "{b: 2}\n"}, []int{1, 1, 3}},
	} {
		rd := NewReader(strings.NewReader(tc.in))
		var seps, raws []string
		var lines []int
		for {
			d, err := rd.Next()
			if err != nil {
				break
			}
			seps, raws, lines = append(seps, string(d.Sep)), append(raws, string(d.Raw)), append(lines, d.Line)
		}
		if strings.Join(seps, "|") != strings.Join(tc.seps, "|") || strings.Join(raws, "|") != strings.Join(tc.raws, "|") {
			t.Errorf("%q: seps %q raws %q, want %q %q", tc.in, seps, raws, tc.seps, tc.raws)
		}
		for k := range lines {
			if k < len(tc.lines) && lines[k] != tc.lines[k] {
				t.Errorf("%q: lines %v, want %v", tc.in, lines, tc.lines)
				break
			}
		}
	}
}

// TestReaderBoundsDocuments: a document larger than the bound ends the
// stream with one line naming where it starts, having read no more than
// the bound of it.
func TestReaderBoundsDocuments(t *testing.T) {
	defer func(n int) { maxDocumentBytes = n }(maxDocumentBytes)
	maxDocumentBytes = 1 << 10
	big := "a: 1\n---\nb: |\n" + strings.Repeat("  xxxxxxx\n", 400) + "---\nc: 1\n"
	for _, in := range []string{big, "{\"a\":1}\n{\"b\":\"" + strings.Repeat("x", 4<<10) + "\"}"} {
		_, err := ReadManifests([]byte(in))
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "larger than 1024 bytes") {
			t.Errorf("error %v", err)
		}
	}
	long := strings.Repeat("y", 4<<10)
	if _, err := ReadManifests([]byte(long)); err == nil || !strings.Contains(err.Error(), "line 1: longer than 1024 bytes") {
		t.Errorf("one long line: %v", err)
	}
}

package statevol

import "testing"

func TestParseMarker(t *testing.T) {
	for name, ok := range map[string]bool{
		"00000000000000000003.stopped.web": true,
		"00000000000000000003.started.web": true,
		"00000000000000000003.failed.web":  true,
		"00000000000000000003.stopped.":    false,
		"00000000000000000003.other.web":   false,
		"00000000000000000003.stopped.../": false,
		"0000000000000000003.stopped.web":  false,
	} {
		if _, _, _, got := ParseMarker(name); got != ok {
			t.Errorf("%s: %v, want %v", name, got, ok)
		}
	}
}

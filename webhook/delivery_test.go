package webhook

import "testing"

// TestRuntimeMountsImages: the runtimes and releases that mount image
// volumes, as nodes report them in status.nodeInfo.containerRuntimeVersion.
func TestRuntimeMountsImages(t *testing.T) {
	for rt, want := range map[string]bool{
		"containerd://2.1.0":         true,
		"containerd://v2.4.2":        true,
		"containerd://2.1.0+unknown": true,
		"containerd://2.0.5":         false,
		"containerd://1.7.27":        false,
		"containerd://1.6.20~ds1":    false,
		"cri-o://1.31.0":             true,
		"cri-o://1.30.4":             false,
		"docker://27.5.1":            false,
		"containerd:2.1.0":           false,
		"":                           false,
		"containerd://":              false,
		"containerd://garbage":       false,
	} {
		if got := runtimeMountsImages(rt); got != want {
			t.Errorf("%q: %v, want %v", rt, got, want)
		}
	}
}

package injector

import "testing"

func TestUnpinnedImage(t *testing.T) {
	for image, unpinned := range map[string]bool{
		"ghcr.io/restart-supervisor/restart-supervisor:v0.1.0":                                                false,
		"ghcr.io/restart-supervisor/restart-supervisor:v0.2.0-rc.1":                                           false,
		"registry.example.com:5000/team/restart-supervisor:v0.1.0":                                            false,
		"registry.example.com/rs@sha256:df679756d8531a62a1ee654504d4c84443c21bf6401891fa6c20d8a6fe818bf5":     false,
		"registry.example.com/rs:dev@sha256:df679756d8531a62a1ee654504d4c84443c21bf6401891fa6c20d8a6fe818bf5": false,
		"registry.example.com/rs:deadline":                                                                    false, // a word, not hex
		"ghcr.io/restart-supervisor/restart-supervisor:9df1e34":                                               true,
		"ghcr.io/restart-supervisor/restart-supervisor:9df1e34c5a323c4ef9b49b410783cef537b111b6":              true,
		"ghcr.io/restart-supervisor/restart-supervisor:9df1e34-dirty":                                         true,
		"ghcr.io/restart-supervisor/restart-supervisor:v0.1.0-3-g9df1e34":                                     true,
		"ghcr.io/restart-supervisor/restart-supervisor:v0.1.0-dirty":                                          true,
		"ghcr.io/restart-supervisor/restart-supervisor:dev":                                                   true,
		"ghcr.io/restart-supervisor/restart-supervisor:latest":                                                true,
		"ghcr.io/restart-supervisor/restart-supervisor":                                                       true,
		"registry.example.com:5000/restart-supervisor":                                                        true, // the port is no tag
		"restart-supervisor:": true,
	} {
		if got := UnpinnedImage(image) != ""; got != unpinned {
			t.Errorf("UnpinnedImage(%q) = %q, want unpinned %v", image, UnpinnedImage(image), unpinned)
		}
	}
}

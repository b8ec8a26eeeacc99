package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
)

// platformKeys lists the keys of RESTART_SUPERVISOR_PLATFORM_COMMANDS that
// describe this binary's platform, most specific first: "os/arch/variant"
// (when the architecture has variants), then "os/arch".
func platformKeys() []string {
	base := runtime.GOOS + "/" + runtime.GOARCH
	if v := platformVariant(); v != "" {
		return []string{base + "/" + v, base}
	}
	return []string{base}
}

// platformVariant is the OCI platform variant of this build: v6/v7 for
// arm from GOARM, v8 for arm64. Other architectures' images rarely carry a
// variant, and the entry without one is the fallback anyway.
func platformVariant() string {
	switch runtime.GOARCH {
	case "arm64":
		return "v8"
	case "arm":
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "GOARM" && s.Value != "" {
					return "v" + strings.SplitN(s.Value, ",", 2)[0]
				}
			}
		}
		return "v7"
	}
	return ""
}

// platformCommand picks this platform's entrypoint from the JSON map of
// "os/arch[/variant]" to argv.
func platformCommand(doc string, keys []string) ([]string, error) {
	var m map[string][]string
	if err := json.Unmarshal([]byte(doc), &m); err != nil {
		return nil, fmt.Errorf("want a JSON object of \"os/arch\" to an argv array: %v", err)
	}
	for _, k := range keys {
		if argv, ok := m[k]; ok {
			return argv, nil
		}
	}
	avail := make([]string, 0, len(m))
	for k := range m {
		avail = append(avail, k)
	}
	sort.Strings(avail)
	return nil, fmt.Errorf("no entry for platform %s; available: %s", keys[0], strings.Join(avail, ", "))
}

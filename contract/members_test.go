package contract

import (
	"reflect"
	"testing"
)

func TestPodMembersRoundTrip(t *testing.T) {
	in := []PodMember{{"proxy", MemberSidecar}, {"fetch-rerun", MemberInit}, {"trainer", MemberRegular}, {"loader", MemberRegular}}
	s := FormatPodMembers(in)
	if s != "proxy:sidecar,fetch-rerun:init,trainer:regular,loader:regular" {
		t.Fatalf("formatted %q", s)
	}
	out, err := ParsePodMembers(s)
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("parsed %v, %v", out, err)
	}
	for _, bad := range []string{"a", ":regular", "a:initial", "a:regular,a:sidecar"} {
		if _, err := ParsePodMembers(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if out, err := ParsePodMembers(""); err != nil || out != nil {
		t.Errorf("empty: %v, %v", out, err)
	}
}

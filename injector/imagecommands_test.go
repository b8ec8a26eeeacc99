package injector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/imagelookup"
	"github.com/restart-supervisor/restart-supervisor/imagelookup/registry"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil/testregistry"
)

// patchBytes is the size of res's patch encoded as JSON.
func patchBytes(t *testing.T, res *Result) int {
	t.Helper()
	// As the webhook encodes it (webhook.encodePatch): without HTML
	// escapes.
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res.Patch); err != nil {
		t.Fatal(err)
	}
	return b.Len()
}

// H2: an index of 32 platforms whose configs (each under MaxConfigBytes)
// hold entrypoints of about 1 MiB of "<" was copied into
// RESTART_SUPERVISOR_PLATFORM_COMMANDS, JSON-escaped six times over: a
// 306 MB patch and a 1.96 GB webhook for one container. The lookup now
// keeps at most MaxArgvBytes per platform and MaxImageArgvBytes in all.
func TestEntrypointArgvCapped(t *testing.T) {
	tr := testregistry.New(t)
	// "A", not "<": the registry's configs are written by Go, which
	// escapes "<" in them; the fine image has one "<" per platform.
	big := strings.Repeat("A", 1000<<10)
	var huge, wide, fine []testregistry.PlatformImage
	for i := range 32 {
		p := v1.Platform{OS: "linux", Architecture: fmt.Sprintf("arch%d", i)}
		// Each platform differs, so that no uniform command applies.
		huge = append(huge, testregistry.PlatformImage{Platform: p, Img: testregistry.Image(t, "linux", p.Architecture, []string{fmt.Sprintf("/%d", i), big}, nil)})
		wide = append(wide, testregistry.PlatformImage{Platform: p, Img: testregistry.Image(t, "linux", p.Architecture, []string{fmt.Sprintf("/%d", i), big[:3<<10]}, nil)})
		fine = append(fine, testregistry.PlatformImage{Platform: p, Img: testregistry.Image(t, "linux", p.Architecture, []string{fmt.Sprintf("/%d<", i), big[:1<<10]}, nil)})
	}
	tr.PushIndex(t, "registry.test/huge:1", testregistry.Index(huge...))
	tr.PushIndex(t, "registry.test/wide:1", testregistry.Index(wide...))
	tr.PushIndex(t, "registry.test/fine:1", testregistry.Index(fine...))
	inj := New(Options{Resolver: registry.New(registry.Options{Transport: tr.Transport})})
	pod := func(image string) *corev1.Pod {
		return podYAML(t, `
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: apps}
spec:
  restartPolicy: Never
  containers:
  - name: app
    image: `+image+`
    restartPolicy: Never
    restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [75]}}]
`)
	}

	for _, tc := range []struct{ image, want string }{
		{"registry.test/huge:1", "ENTRYPOINT and CMD hold 2 strings of 1024002 bytes, over the cap of 1024 strings and 32 KiB"},
		{"registry.test/wide:1", "the ENTRYPOINT and CMD of its platforms hold more than 64 KiB together, over the cap"},
	} {
		var err error
		var res *Result
		cost := testutil.HeapCost(func() { res, err = inj.PodPatch(context.Background(), pod(tc.image)) })
		t.Logf("%s: %d MiB allocated (registry and lookup included)", tc.image, cost>>20)
		var ee *EntrypointError
		if !errors.As(err, &ee) || !strings.Contains(err.Error(), tc.want) {
			size := 0
			if res != nil {
				size = patchBytes(t, res)
			}
			t.Errorf("%s: want an entrypoint error with %q, got %v (patch of %d bytes)", tc.image, tc.want, err, size)
		}
		if err != nil && len(err.Error()) > 512 {
			t.Errorf("%s: error of %d bytes", tc.image, len(err.Error()))
		}
		// The registry serves 32 MiB of configs; the lookup holds a few
		// of them at once and keeps none.
		if cost > 64<<20 {
			t.Errorf("%s: %d MiB allocated", tc.image, cost>>20)
		}
	}

	res, err := inj.PodPatch(context.Background(), pod("registry.test/fine:1"))
	if err != nil {
		t.Fatal(err)
	}
	size := patchBytes(t, res)
	t.Logf("32 platforms of 1 KiB entrypoints: patch of %d bytes", size)
	if size > MaxPlatformCommandsBytes+8<<10 {
		t.Errorf("patch of %d bytes", size)
	}
	var env string
	for _, op := range res.Patch {
		if c, ok := op.Value.(corev1.Container); ok {
			for _, e := range c.Env {
				if e.Name == contract.EnvPlatformCommands {
					env = e.Value
				}
			}
		}
		if e, ok := op.Value.([]corev1.EnvVar); ok {
			for _, e := range e {
				if e.Name == contract.EnvPlatformCommands {
					env = e.Value
				}
			}
		}
	}
	if strings.Contains(env, `\u003c`) || !strings.Contains(env, "/31<") {
		t.Errorf("%s is HTML-escaped or missing: %.80q", contract.EnvPlatformCommands, env)
	}
}

// Each image's commands are capped, but every container of the image gets
// a copy: 64 containers of an image of 32 platforms with 1 KiB entrypoints
// would build 2.3 MB of commands. The mutation counts them as it adds
// them and stops past MaxImageCommandsBytes.
func TestImageCommandsPerPodCapped(t *testing.T) {
	tr := testregistry.New(t)
	var pis []testregistry.PlatformImage
	for i := range 32 {
		p := v1.Platform{OS: "linux", Architecture: fmt.Sprintf("arch%d", i)}
		pis = append(pis, testregistry.PlatformImage{Platform: p, Img: testregistry.Image(t, "linux", p.Architecture, []string{fmt.Sprintf("/%d", i), strings.Repeat("A", 1<<10)}, nil)})
	}
	tr.PushIndex(t, "registry.test/wide:1", testregistry.Index(pis...))
	inj := New(Options{Resolver: registry.New(registry.Options{Transport: tr.Transport})})
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: apps}\nspec:\n  restartPolicy: Never\n  containers:\n")
	for i := range 64 {
		fmt.Fprintf(&b, "  - name: c%d\n    image: registry.test/wide:1\n    restartPolicy: Never\n    restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [75]}}]\n", i)
	}
	pod := podYAML(t, b.String())
	var err error
	var res *Result
	cost := testutil.HeapCost(func() { res, err = inj.PodPatch(context.Background(), pod) })
	t.Logf("64 containers: %d MiB allocated, %v", cost>>20, err)
	want := fmt.Sprintf("the commands taken from the images of the pod's containers pass %d bytes", MaxImageCommandsBytes)
	if err == nil || !strings.Contains(err.Error(), want) {
		size := 0
		if res != nil {
			size = patchBytes(t, res)
		}
		t.Errorf("want an error with %q, got %v (patch of %d bytes)", want, err, size)
	}
	if cost > 32<<20 {
		t.Errorf("%d MiB allocated", cost>>20)
	}
}

// TestImageArgv: what the image adds before the container's args, as
// Kubernetes runs it: no ENTRYPOINT + args → args alone; no args → CMD.
func TestImageArgv(t *testing.T) {
	cfg := imagelookup.ImageConfig{Cmd: []string{"python", "main.py"}}
	if got := imageArgv(cfg, true); len(got) != 0 {
		t.Errorf("with args: %v", got)
	}
	if got := imageArgv(cfg, false); strings.Join(got, " ") != "python main.py" {
		t.Errorf("without args: %v", got)
	}
	cfg.Entrypoint = []string{"/e"}
	if got := imageArgv(cfg, true); strings.Join(got, " ") != "/e" {
		t.Errorf("entrypoint with args: %v", got)
	}
	if got := imageArgv(cfg, false); strings.Join(got, " ") != "/e python main.py" {
		t.Errorf("entrypoint without args: %v", got)
	}
}

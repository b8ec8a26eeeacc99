package injector

import (
	"bytes"
	"context"
	"io"
	"testing"

	corev1 "k8s.io/api/core/v1"
	kubeyaml "sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/internal/benchstream"
)

// benchStream is a stream of docs documents whose Pods leave the entrypoint
// to the image (looked up once, then answered from the cache).
func benchStream(docs int) []byte {
	b, _ := benchstream.Stream(docs, false)
	return b
}

// BenchmarkInjectStream measures the offline path end to end (read, mutate,
// write) on a 1000-document stream; pods/s counts the pod-bearing documents.
func BenchmarkInjectStream(b *testing.B) {
	inj, _ := goldenInjector(b)
	stream := benchStream(1000)
	warm, err := ReadManifests(stream)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := inj.InjectManifests(context.Background(), warm); err != nil {
		b.Fatal(err)
	}
	pods := 0
	for _, d := range warm.Docs {
		if d.Changed() {
			pods++
		}
	}
	b.SetBytes(int64(len(stream)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, err := ReadManifests(stream)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := inj.InjectManifests(context.Background(), m); err != nil {
			b.Fatal(err)
		}
		if _, err := m.WriteTo(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(pods*b.N)/b.Elapsed().Seconds(), "pods/s")
}

// BenchmarkInjectStreamed is BenchmarkInjectStream through InjectStream,
// the CLI's path: read, inject and write document by document.
func BenchmarkInjectStreamed(b *testing.B) {
	inj, _ := goldenInjector(b)
	stream := benchStream(1000)
	pods := 0
	if err := inj.InjectStream(context.Background(), bytes.NewReader(stream), io.Discard, func(d *Document, rs []ObjectReport) {
		if d.Err != nil {
			b.Fatal(d.Err)
		}
		for _, r := range rs {
			if r.Injected {
				pods++
			}
		}
	}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(stream)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := inj.InjectStream(context.Background(), bytes.NewReader(stream), io.Discard, func(*Document, []ObjectReport) {}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(pods*b.N)/b.Elapsed().Seconds(), "pods/s")
}

// BenchmarkMutatePod measures the per-pod cost on a pod whose container
// has no command, its image already in the resolver's cache: patch-only is
// PodPatch, the webhook's call; with-pod is MutatePod, which also applies
// the patch to a copy of the pod for Result.Pod.
func BenchmarkMutatePod(b *testing.B) {
	inj, _ := goldenInjector(b)
	pod := &corev1.Pod{}
	pod.Name, pod.Namespace = "worker", "shop"
	pod.Spec.Containers = []corev1.Container{{Name: "worker", Image: "registry.test/app:1", Args: []string{"--queue", "q"}}}
	pol := corev1.ContainerRestartPolicyNever
	pod.Spec.Containers[0].RestartPolicy = &pol
	pod.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{Action: "Restart",
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: "In", Values: []int32{42}}}}
	for _, tc := range []struct {
		name   string
		mutate func(context.Context, *corev1.Pod) (*Result, error)
	}{
		{"patch-only", inj.PodPatch},
		{"with-pod", inj.MutatePod},
	} {
		b.Run(tc.name, func(b *testing.B) {
			if _, err := tc.mutate(context.Background(), pod); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := tc.mutate(context.Background(), pod); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pods/s")
		})
	}
}

// BenchmarkYAMLRoundTripBaseline is the reference for BenchmarkInjectStream
// in the same run: reading and re-serialising the same stream with
// sigs.k8s.io/yaml, as kubectl-style tools do, without any injection.
func BenchmarkYAMLRoundTripBaseline(b *testing.B) {
	m, err := ReadManifests(benchStream(1000))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, d := range m.Docs {
			var v map[string]any
			if err := kubeyaml.Unmarshal(d.Raw, &v); err != nil {
				b.Fatal(err)
			}
			if _, err := kubeyaml.Marshal(v); err != nil {
				b.Fatal(err)
			}
		}
	}
}

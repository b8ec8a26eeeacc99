package manifests

import (
	"bytes"
	"context"
	"io"
	"testing"

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
	if _, err := Inject(context.Background(), inj, warm); err != nil {
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
		if _, err := Inject(context.Background(), inj, m); err != nil {
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
	if err := InjectStream(context.Background(), inj, bytes.NewReader(stream), io.Discard, func(d *Document, rs []ObjectReport) {
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
		if err := InjectStream(context.Background(), inj, bytes.NewReader(stream), io.Discard, func(*Document, []ObjectReport) {}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(pods*b.N)/b.Elapsed().Seconds(), "pods/s")
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

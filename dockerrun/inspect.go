package dockerrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/restart-supervisor/restart-supervisor/imagelookup"
)

// ErrNoSuchImage means the local engine answered but does not have the image.
var ErrNoSuchImage = errors.New("no such image in the local engine")

// InspectLocal reads an image's configuration from the local Docker engine
// with `docker image inspect` (the docker CLI named by dockerCLI, "docker"
// when empty). Asking the CLI keeps the engine's client library, and its
// dependencies, out of this module; the CLI also knows the user's context,
// DOCKER_HOST and TLS settings.
func InspectLocal(ctx context.Context, dockerCLI, image string) (ImageConfig, error) {
	if dockerCLI == "" {
		dockerCLI = "docker"
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, dockerCLI, "image", "inspect", "--", image)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(strings.ToLower(msg), "no such image") {
			return ImageConfig{}, fmt.Errorf("image %s: %w", image, ErrNoSuchImage)
		}
		if msg == "" {
			return ImageConfig{}, fmt.Errorf("image %s: docker image inspect: %w", image, err)
		}
		return ImageConfig{}, fmt.Errorf("image %s: docker image inspect: %s", image, firstLine(msg))
	}
	return ParseInspect(image, stdout.Bytes())
}

// ParseInspect decodes the JSON array `docker image inspect` prints for one
// image.
func ParseInspect(image string, data []byte) (ImageConfig, error) {
	var out []struct {
		Os           string
		Architecture string
		Variant      string
		Config       *struct {
			Entrypoint []string
			Cmd        []string
			StopSignal string
		}
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return ImageConfig{}, fmt.Errorf("image %s: reading docker image inspect output: %v", image, err)
	}
	if len(out) != 1 {
		return ImageConfig{}, fmt.Errorf("image %s: docker image inspect returned %d images, want 1", image, len(out))
	}
	ic := ImageConfig{Platform: imagelookup.PlatformKey(out[0].Os, out[0].Architecture, out[0].Variant)}
	if c := out[0].Config; c != nil {
		ic.Entrypoint, ic.Cmd, ic.StopSignal = c.Entrypoint, c.Cmd, c.StopSignal
	}
	return ic, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

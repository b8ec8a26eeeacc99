package contract

// Version is the release of both binaries and both images. Every build
// stamps the same value into it:
//
//	-ldflags "-X github.com/restart-supervisor/restart-supervisor/contract.Version=VERSION"
//
// (Makefile, and the VERSION build argument of Dockerfile.supervisor and
// Dockerfile.injector). The supervisor reports it in `version` and in its
// status documents; the injector records it in AnnotationStatus and, unless
// told otherwise, installs the supervisor image tagged with it, so an
// injector and the supervisor it installs come from the same build.
//
// An unstamped build (go run, go test, go install) carries the release the
// source tree is prepared for.
var Version = "v0.1.0"

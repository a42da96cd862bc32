package extproc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/pipeline"
)

// Options configure the ext_proc server. They are the proxy's options, so
// that both front ends see the same providers, keys and limits.
type Options struct {
	Pipeline    *pipeline.Pipeline
	OpenAI      config.Provider
	Anthropic   config.Provider
	Credentials pipeline.Credentials
	Limits      config.Limits
	Logger      *slog.Logger
}

// Server is the ext_proc front end.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	o    Options
	p    *pipeline.Pipeline
	log  *slog.Logger
	grpc *grpc.Server
}

// Compile-time guard: Envoy calls Process through this interface.
var _ extprocv3.ExternalProcessorServer = (*Server)(nil)

// New builds the server.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{o: o, p: o.Pipeline, log: o.Logger}
	// A buffered body travels in one gRPC message: the limit must admit the
	// largest body the gateway accepts, plus the message's envelope.
	maxMsg := int(max(o.Limits.MaxBodyBytes, o.Limits.MaxResponseBytes, 4<<20)) + 1<<20
	s.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(maxMsg),
		grpc.MaxSendMsgSize(maxMsg),
		// Envoy keeps one long-lived HTTP/2 connection and pings it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	extprocv3.RegisterExternalProcessorServer(s.grpc, s)
	return s
}

// Serve accepts Envoy's connections on ln until Stop.
func (s *Server) Serve(ln net.Listener) error {
	err := s.grpc.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown stops accepting streams and waits for the ones in flight until
// ctx ends; then it cuts them, and each cut stream still settles (Finish
// runs on every exit path of Process).
func (s *Server) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
		return ctx.Err()
	}
}

// received is one Recv result, handed from the reading goroutine.
type received struct {
	req *extprocv3.ProcessingRequest
	err error
}

// Process serves one HTTP exchange. Envoy opens one stream per request.
// Receiving runs in its own goroutine so that the loop can also react to
// the run being cancelled or ended while the upstream call is in flight,
// as the proxy does by cancelling its upstream request.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	x := &exchange{s: s, ctx: context.WithoutCancel(ctx)}
	recv := make(chan received)
	go func() {
		for {
			req, err := stream.Recv()
			select {
			case recv <- received{req, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case r := <-recv:
			if r.err != nil {
				// Envoy closed the stream before the exchange completed
				// (client gone, Envoy shutting down): settle what we have.
				if errors.Is(r.err, io.EOF) {
					x.abort(io.ErrUnexpectedEOF)
					return nil
				}
				x.abort(r.err)
				if status.Code(r.err) == codes.Canceled {
					return nil
				}
				return r.err
			}
			resp, done := x.handle(r.req)
			if resp != nil {
				if err := stream.Send(resp); err != nil {
					x.abort(err)
					return err
				}
			}
			if done {
				return nil
			}
		case <-ctx.Done():
			// Envoy went away; the reader may have seen it first.
			x.abort(ctx.Err())
			return nil
		case <-x.runDone():
			// The run was cancelled or ended elsewhere while this call was
			// in flight: end the call now, in the provider's format.
			if resp := x.runEnded(); resp != nil {
				if err := stream.Send(resp); err != nil {
					return err
				}
			}
			return nil
		}
	}
}

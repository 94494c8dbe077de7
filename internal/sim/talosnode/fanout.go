package talosnode

import (
	"context"
	"path"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// fanOutUnary answers a unary call with a "nodes" header as apid does
// (talosctl -n a,b), even when it names one node: the call goes to each
// node, as if
// its "node" header named that node alone, and their answers' messages
// come in one response, each with the node's name, as the client gave
// it, in its metadata; a node that fails adds a message with only its
// name and the error in its metadata. ok is false for a call without
// such a header, which is answered as usual.
func (h *Host) fanOutUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, ok bool, err error) {
	md, _ := metadata.FromIncomingContext(ctx)
	names := md.Get("nodes")
	if len(names) == 0 {
		return nil, false, nil
	}
	out, err := newResponse(info.FullMethod)
	if err != nil {
		return nil, true, err
	}
	for _, name := range names {
		one := md.Copy()
		one.Delete("nodes")
		one.Set("node", name)
		r, err := h.unaryOne(metadata.NewIncomingContext(ctx, one), req, info, handler)
		if err != nil {
			appendFailed(out, name, err)
			continue
		}
		m := r.(proto.Message)
		nameMessages(m, name)
		proto.Merge(out, m)
	}
	return out, true, nil
}

// unaryOne answers a unary call for the node it reached or names.
func (h *Host) unaryOne(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := h.authorize(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// newResponse returns an empty response of a unary method ("/svc/Method").
func newResponse(method string) (proto.Message, error) {
	svc, name := path.Split(method)
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(strings.Trim(svc, "/")))
	if err != nil {
		return nil, status.Errorf(codes.Unimplemented, "unknown service %s", svc)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok || sd.Methods().ByName(protoreflect.Name(name)) == nil {
		return nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(sd.Methods().ByName(protoreflect.Name(name)).Output().FullName())
	if err != nil {
		return nil, status.Errorf(codes.Unimplemented, "unknown response of %s", method)
	}
	return mt.New().Interface(), nil
}

// messagesOf returns the "messages" field of a Talos response, and its
// elements' "metadata" field; ok is false for a response without them.
func messagesOf(m proto.Message) (messages, meta protoreflect.FieldDescriptor, ok bool) {
	messages = m.ProtoReflect().Descriptor().Fields().ByName("messages")
	if messages == nil || !messages.IsList() || messages.Message() == nil {
		return nil, nil, false
	}
	meta = messages.Message().Fields().ByName("metadata")
	return messages, meta, meta != nil && meta.Message() != nil
}

// nameMessages sets the host name in the metadata of each of m's
// messages to name.
func nameMessages(m proto.Message, name string) {
	messages, meta, ok := messagesOf(m)
	if !ok {
		return
	}
	list := m.ProtoReflect().Get(messages).List()
	for i := range list.Len() {
		md := list.Get(i).Message().Mutable(meta).Message()
		md.Set(md.Descriptor().Fields().ByName("hostname"), protoreflect.ValueOfString(name))
	}
}

// appendFailed adds to m a message whose metadata says that node name
// failed with err, as apid does for a node of a fanned-out call.
func appendFailed(m proto.Message, name string, err error) {
	messages, meta, ok := messagesOf(m)
	if !ok {
		return
	}
	list := m.ProtoReflect().Mutable(messages).List()
	el := list.NewElement()
	el.Message().Set(meta, protoreflect.ValueOfMessage((&common.Metadata{Hostname: name, Error: err.Error(), Status: status.Convert(err).Proto()}).ProtoReflect()))
	list.Append(el)
}

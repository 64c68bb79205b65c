"""The committed generated code must be exactly what the .proto files generate."""

from proto import generate


def test_generated_code_matches_proto_files() -> None:
    assert generate.proto_files(), "no .proto files found"
    diff = generate.differences()
    assert not diff, f"stale generated code, run `python -m proto.generate`: {diff}"


def test_generated_imports_use_the_proto_package() -> None:
    from proto import party_pb2, party_pb2_grpc, peer_pb2, relay_pb2_grpc

    assert party_pb2.DESCRIPTOR.dependencies[0].name == "proto/common.proto"
    assert hasattr(party_pb2_grpc, "PartyStub") and hasattr(relay_pb2_grpc, "RelayStub")
    assert peer_pb2.HELLO == 1

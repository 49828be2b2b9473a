#include "ptc/formats/dcp_metadata.h"

#include "ptc/formats/pickle_writer.h"
#include "ptc/formats/torch_archive.h"

namespace ptcfs::formats {
namespace {

constexpr const char* kMeta = "torch.distributed.checkpoint.metadata";

void size(PickleWriter& w, const ptc::Shape& s) {  // torch.Size((...))
  w.global("torch", "Size");
  w.mark();
  w.int_tuple(s);
  w.tuple();
  w.reduce();
}

// An object of `name` whose state is a dict: the caller writes key, value pairs, then end().
void object_dict(PickleWriter& w, const char* module, const char* name) {
  w.new_object(module, name);
  w.empty_dict();
  w.mark();
}
void end(PickleWriter& w) {
  w.setitems();
  w.build();
}

void properties(PickleWriter& w, ptc::DType dtype) {
  w.new_object(kMeta, "TensorProperties");
  w.mark();  // its state: (dtype, layout, requires_grad, memory_format, pin_memory)
  w.global("torch", torch_dtype_name(dtype));
  w.global("torch", "strided");
  w.boolean(false);
  w.global("builtins", "getattr");
  w.mark();
  w.global(kMeta, "_MEM_FORMAT_ENCODING");
  w.str("TORCH_CONTIGUOUS_FORMAT");
  w.tuple();
  w.reduce();
  w.boolean(false);
  w.tuple();
  w.build();
}

}  // namespace

std::string dcp_metadata(const std::vector<DcpItem>& items) {
  PickleWriter w;
  object_dict(w, kMeta, "Metadata");
  w.str("state_dict_metadata");
  w.empty_dict();
  w.mark();
  for (const DcpItem& it : items) {
    w.str(it.fqn);
    if (it.bytes) {
      w.new_object(kMeta, "BytesStorageMetadata");
      continue;
    }
    object_dict(w, kMeta, "TensorStorageMetadata");
    w.str("properties");
    properties(w, it.dtype);
    w.str("size");
    size(w, it.size);
    w.str("chunks");
    w.empty_list();
    w.mark();
    for (const DcpChunk& c : it.chunks) {
      object_dict(w, kMeta, "ChunkStorageMetadata");
      w.str("offsets");
      size(w, c.offsets);
      w.str("sizes");
      size(w, c.sizes);
      end(w);
    }
    w.appends();
    end(w);
  }
  w.setitems();
  w.str("planner_data");
  w.none();
  w.str("storage_data");
  w.empty_dict();
  w.mark();
  for (const DcpItem& it : items) {
    for (size_t i = 0; i < it.chunks.size(); ++i) {
      const DcpChunk& c = it.chunks[i];
      object_dict(w, kMeta, "MetadataIndex");
      w.str("fqn");
      w.str(it.fqn);
      w.str("index");
      if (it.bytes) {
        w.none();
      } else {
        w.integer(static_cast<int64_t>(i));
        w.str("offset");
        size(w, c.offsets);
      }
      end(w);
      object_dict(w, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
      w.str("relative_path");
      w.str(c.file);
      w.str("offset");
      w.integer(static_cast<int64_t>(c.offset));
      w.str("length");
      w.integer(static_cast<int64_t>(c.length));
      end(w);
    }
  }
  w.setitems();
  w.str("storage_meta");
  object_dict(w, kMeta, "StorageMeta");
  w.str("checkpoint_id");
  w.none();
  w.str("save_id");
  w.str("ptcfs");
  w.str("load_id");
  w.none();
  w.str("modules");
  w.empty_list();
  end(w);
  w.str("version");
  w.str("1.0.0");
  end(w);
  return w.finish();
}

}  // namespace ptcfs::formats

#include "tensor/tensor.h"

#include <algorithm>
#include <cstring>

namespace spore {

int64_t shape_numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Strides contiguous_strides(std::span<const int64_t> shape) {
  Strides s(shape.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return s;
}

std::string shape_str(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor Tensor::empty(Shape shape, DType dtype) { return empty_on(host_device, std::move(shape), dtype); }

Tensor Tensor::empty_on(Device device, Shape shape, DType dtype) {
  for (int64_t d : shape) SPORE_CHECK(d >= 0, ErrorCode::shape_mismatch, "negative dimension in shape {}", shape_str(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.storage_ = Storage::allocate(t.nbytes(), nullptr, device);
  t.defined_ = true;
  return t;
}

namespace {
// Host code reads elements only of host tensors.
void check_host(const Tensor& t, const char* what) {
  SPORE_CHECK(t.device().is_host(), ErrorCode::invalid_argument,
              "{}: the tensor is on device {}; copy it to the host first (Tensor::to(host_device))", what,
              device_name(t.device()));
}
}  // namespace

Tensor Tensor::to(Device device) const {
  if (this->device() == device && is_contiguous()) return *this;
  const Tensor src = this->device().is_host() ? contiguous() : *this;
  SPORE_CHECK(src.is_contiguous(), ErrorCode::invalid_argument, "to({}): a strided view on device {} cannot be packed",
              device_name(device), device_name(this->device()));
  Tensor t = empty_on(device, shape_, dtype_);
  copy_bytes(t.raw_data(), device, src.raw_data(), src.device(), nbytes());
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  if (t.nbytes()) std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::from_doubles(const std::vector<double>& values, Shape shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  SPORE_CHECK(static_cast<int64_t>(values.size()) == t.numel(), ErrorCode::shape_mismatch,
              "from_doubles: {} values for shape {}", values.size(), shape_str(t.shape()));
  char* p = static_cast<char*>(t.raw_data());
  const size_t es = dtype_size(dtype);
  for (size_t i = 0; i < values.size(); ++i) store_from_double(p + i * es, dtype, values[i]);
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> s, Shape shape, Strides strides, int64_t offset, DType dtype) {
  SPORE_ASSERT(shape.size() == strides.size(), "shape/strides rank mismatch");
  Tensor t;
  t.storage_ = std::move(s);
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  t.offset_ = offset;
  t.dtype_ = dtype;
  t.defined_ = true;
  return t;
}

Tensor Tensor::symbolic(Shape shape, DType dtype, SymbolicRef ref) {
  Tensor t;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.sym_ = std::make_shared<const SymbolicRef>(std::move(ref));
  t.defined_ = true;
  return t;
}

int64_t Tensor::dim(int i) const {
  const int r = rank();
  SPORE_CHECK(i >= -r && i < r, ErrorCode::invalid_argument, "dim {} out of range for rank {}", i, r);
  return shape_[i < 0 ? i + r : i];
}

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expect) return false;
    expect *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  SPORE_CHECK(defined_, ErrorCode::invalid_argument, "access to an undefined tensor");
  if (sym_) {
    SPORE_FAIL(ErrorCode::invalid_argument,
               "cannot read the value of a symbolic tensor while tracing (it is the output of op '{}'); "
               "data-dependent control flow cannot be traced into a graph",
               sym_->producer);
  }
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

double Tensor::item_at(int64_t flat) const {
  check_host(*this, "item_at");
  SPORE_CHECK(flat >= 0 && flat < numel(), ErrorCode::invalid_argument, "index {} out of range for {} elements", flat, numel());
  int64_t off = 0;
  for (int i = rank() - 1; i >= 0; --i) {
    off += (flat % shape_[i]) * strides_[i];
    flat /= shape_[i];
  }
  return load_as_double(static_cast<const char*>(raw_data()) + off * static_cast<int64_t>(dtype_size(dtype_)), dtype_);
}

double Tensor::item() const {
  SPORE_CHECK(numel() == 1, ErrorCode::invalid_argument, "item() needs one element, tensor has shape {}", shape_str(shape_));
  return item_at(0);
}

std::vector<double> Tensor::to_doubles() const {
  check_host(*this, "to_doubles");
  std::vector<double> out(numel());
  Tensor c = contiguous();
  const char* p = static_cast<const char*>(c.raw_data());
  const size_t es = dtype_size(dtype_);
  for (int64_t i = 0; i < numel(); ++i) out[i] = load_as_double(p + i * es, dtype_);
  return out;
}

Tensor Tensor::as_strided(Shape shape, Strides strides, int64_t offset) const {
  SPORE_CHECK(!sym_, ErrorCode::invalid_argument, "as_strided on a symbolic tensor");
  Tensor t = *this;
  t.autograd_.reset();
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  t.offset_ = offset;
  return t;
}

Tensor Tensor::view(Shape shape) const {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      SPORE_CHECK(infer < 0, ErrorCode::shape_mismatch, "view: more than one -1 in {}", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) shape[infer] = known == 0 ? 0 : numel() / known;
  SPORE_CHECK(shape_numel(shape) == numel(), ErrorCode::shape_mismatch, "view: cannot view {} as {}",
              shape_str(shape_), shape_str(shape));
  SPORE_CHECK(is_contiguous(), ErrorCode::invalid_argument, "view: tensor is not contiguous");
  Strides st = contiguous_strides(shape);
  return as_strided(std::move(shape), std::move(st), offset_);
}

Tensor Tensor::permute(std::span<const int64_t> perm) const {
  SPORE_CHECK(static_cast<int>(perm.size()) == rank(), ErrorCode::invalid_argument, "permute: {} axes for rank {}", perm.size(), rank());
  Shape sh(rank());
  Strides st(rank());
  std::vector<bool> seen(rank(), false);
  for (int i = 0; i < rank(); ++i) {
    int64_t p = perm[i] < 0 ? perm[i] + rank() : perm[i];
    SPORE_CHECK(p >= 0 && p < rank() && !seen[p], ErrorCode::invalid_argument, "permute: invalid permutation");
    seen[p] = true;
    sh[i] = shape_[p];
    st[i] = strides_[p];
  }
  return as_strided(std::move(sh), std::move(st), offset_);
}

Tensor Tensor::slice(int axis, int64_t start, int64_t stop, int64_t step) const {
  const int r = rank();
  SPORE_CHECK(axis >= -r && axis < r, ErrorCode::invalid_argument, "slice: axis {} out of range", axis);
  if (axis < 0) axis += r;
  SPORE_CHECK(step > 0, ErrorCode::invalid_argument, "slice view: step must be positive");
  const int64_t n = shape_[axis];
  start = std::clamp<int64_t>(start < 0 ? start + n : start, 0, n);
  stop = std::clamp<int64_t>(stop < 0 ? stop + n : stop, 0, n);
  const int64_t len = stop > start ? (stop - start + step - 1) / step : 0;
  Shape sh = shape_;
  Strides st = strides_;
  sh[axis] = len;
  st[axis] = strides_[axis] * step;
  return as_strided(std::move(sh), std::move(st), offset_ + start * strides_[axis]);
}

Tensor Tensor::expand(Shape shape) const {
  SPORE_CHECK(shape.size() >= shape_.size(), ErrorCode::shape_mismatch, "expand: cannot expand {} to {}", shape_str(shape_), shape_str(shape));
  const size_t lead = shape.size() - shape_.size();
  Strides st(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) continue;
    const int64_t d = shape_[i - lead];
    if (d == shape[i]) st[i] = strides_[i - lead];
    else SPORE_CHECK(d == 1, ErrorCode::shape_mismatch, "expand: cannot expand {} to {}", shape_str(shape_), shape_str(shape));
  }
  return as_strided(std::move(shape), std::move(st), offset_);
}

void copy_strided(const Tensor& src, const Tensor& dst) {
  SPORE_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(), ErrorCode::shape_mismatch,
              "copy: {} {} into {} {}", dtype_name(src.dtype()), shape_str(src.shape()), dtype_name(dst.dtype()), shape_str(dst.shape()));
  const int64_t n = src.numel();
  if (n == 0) return;
  const size_t es = dtype_size(src.dtype());
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(dst.raw_data());
  if (src.is_contiguous() && dst.is_contiguous()) {
    copy_bytes(d, dst.device(), s, src.device(), n * es);
    return;
  }
  check_host(src, "copy of a strided tensor");
  check_host(dst, "copy into a strided tensor");
  const int r = src.rank();
  std::vector<int64_t> idx(r, 0);
  const auto& sh = src.shape();
  // Innermost loop over the last dim; odometer over the rest.
  const int64_t inner = r ? sh[r - 1] : 1;
  const int64_t ss = r ? src.strides()[r - 1] : 0, ds = r ? dst.strides()[r - 1] : 0;
  for (int64_t done = 0; done < n; done += inner) {
    int64_t so = 0, doff = 0;
    for (int i = 0; i < r - 1; ++i) {
      so += idx[i] * src.strides()[i];
      doff += idx[i] * dst.strides()[i];
    }
    for (int64_t j = 0; j < inner; ++j) std::memcpy(d + (doff + j * ds) * es, s + (so + j * ss) * es, es);
    for (int i = r - 2; i >= 0; --i) {
      if (++idx[i] < sh[i]) break;
      idx[i] = 0;
    }
  }
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor t = empty_on(device(), shape_, dtype_);
  copy_strided(*this, t);
  return t;
}

bool Tensor::bit_equal(const Tensor& o) const {
  if (dtype_ != o.dtype_ || shape_ != o.shape_) return false;
  check_host(*this, "bit_equal");
  check_host(o, "bit_equal");
  Tensor a = contiguous(), b = o.contiguous();
  return nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), nbytes()) == 0;
}

std::string Tensor::to_string(int max_elems) const {
  if (!defined_) return "Tensor(undefined)";
  std::string s = fmt::format("Tensor({}{}", dtype_name(dtype_), shape_str(shape_));
  if (sym_) return s + ", symbolic)";
  s += ", [";
  const int64_t n = std::min<int64_t>(numel(), max_elems);
  for (int64_t i = 0; i < n; ++i) {
    if (i) s += ", ";
    s += fmt::format("{:.6g}", item_at(i));
  }
  if (numel() > n) s += ", ...";
  return s + "])";
}

}  // namespace spore

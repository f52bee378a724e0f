// Must compile: the control case, so a compile-fail test fails for its own reason only.
import kvlab;
using namespace kvlab::parts;
const kvlab::any_recipe r = kvlab::recipe{.keys = kvlab::stream{int_q{8}, channel{32}},
                                          .eviction = h2o{0.1, 0.1},
                                          .allocation = pyramid{4},
                                          .demote = kvlab::stream{uint_q{2}, token{}}};
int main() {}

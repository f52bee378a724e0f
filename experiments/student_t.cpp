// Student's t quantiles for the runner's seed tables (kvlab.runner:seed_table). A plain
// translation unit, not a module unit: Boost.Math's distribution headers are parsed here
// alone. In the module interface they made its BMI 50 MB larger, and every unit importing
// kvlab.runner paid to load and merge them.
#include <boost/math/distributions/students_t.hpp>

namespace kvlab {

double student_t_quantile(double degrees_of_freedom, double probability) {
  return boost::math::quantile(boost::math::students_t(degrees_of_freedom), probability);
}

} // namespace kvlab

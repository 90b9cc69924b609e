#include "client/dataset_render.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "client/format.h"
#include "client/render.h"
#include "spec/loader.h"

namespace traind::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::traind::v1::ColumnProfile;
using ::traind::v1::Dataset;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void ExpectAllFit(const std::string& text, size_t width) {
  for (const std::string& line : Lines(text)) {
    EXPECT_LE(DisplayWidth(line), width) << "\"" << line << "\"";
  }
}

TEST(DefaultDatasetNameTest, BaseNameWithoutExtensionInNameCharacters) {
  EXPECT_EQ(DefaultDatasetName("customers.csv"), "customers");
  EXPECT_EQ(DefaultDatasetName("data/customers.v2.csv"), "customers.v2");
  EXPECT_EQ(DefaultDatasetName("/home/me/sales 2024 (final).csv"), "sales-2024--final-");
  EXPECT_EQ(DefaultDatasetName("noext"), "noext");
  EXPECT_EQ(DefaultDatasetName("archive.tar.gz"), "archive.tar");
  EXPECT_EQ(DefaultDatasetName("under_score-dash.CSV"), "under_score-dash");
  // Each byte outside the set becomes '-': "é" is two.
  EXPECT_EQ(DefaultDatasetName("donn\xC3\xA9"
                               "es.csv"),
            "donn--es");
  // traind refuses a leading '.'.
  EXPECT_EQ(DefaultDatasetName(".hidden.csv"), "hidden");
  EXPECT_EQ(DefaultDatasetName(".profile"), "profile");
  EXPECT_EQ(DefaultDatasetName("..csv"), "dataset");
  EXPECT_EQ(DefaultDatasetName(""), "dataset");
  EXPECT_EQ(DefaultDatasetName(std::string(300, 'a') + ".csv"), std::string(128, 'a'));
  for (const char* path : {"a b.csv", ".x", "données.csv", "x/y/z.tsv"}) {
    EXPECT_TRUE(IsDatasetName(DefaultDatasetName(path))) << path;
  }
}

TEST(DefaultDatasetNameTest, IsDatasetName) {
  EXPECT_TRUE(IsDatasetName("customers"));
  EXPECT_TRUE(IsDatasetName("a.b_c-D9"));
  EXPECT_TRUE(IsDatasetName(std::string(128, 'x')));
  EXPECT_FALSE(IsDatasetName(std::string(129, 'x')));
  EXPECT_FALSE(IsDatasetName(""));
  EXPECT_FALSE(IsDatasetName(".hidden"));
  EXPECT_FALSE(IsDatasetName("a b"));
  EXPECT_FALSE(IsDatasetName("a:1"));
  EXPECT_FALSE(IsDatasetName("a/b"));
}

TEST(FormatDecimalBytesTest, DecimalUnits) {
  EXPECT_EQ(FormatDecimalBytes(0), "0 B");
  EXPECT_EQ(FormatDecimalBytes(999), "999 B");
  EXPECT_EQ(FormatDecimalBytes(4551), "4.6 kB");
  EXPECT_EQ(FormatDecimalBytes(12'300'000), "12.3 MB");
  EXPECT_EQ(FormatDecimalBytes(999'999), "1.0 MB");
  EXPECT_EQ(FormatDecimalBytes(1'234'000'000), "1.2 GB");
}

TransferProgress Halfway() {
  TransferProgress p;
  p.label = "customers.csv";
  p.done = 5'200'000;
  p.total = 12'300'000;
  p.bytes_per_second = 3'100'000;
  return p;
}

TEST(ProgressLineTest, Width80HasEverything) {
  const std::string line = ProgressLine(Halfway(), 80);
  EXPECT_EQ(line,
            "customers.csv  [#########..............]   42%  5.2/12.3 MB  3.1 MB/s  ETA 0:03");
  EXPECT_EQ(DisplayWidth(line), 79u);
}

TEST(ProgressLineTest, Width40KeepsTheNumbers) {
  const std::string line = ProgressLine(Halfway(), 40);
  EXPECT_EQ(line, " 42%  5.2/12.3 MB  3.1 MB/s  ETA 0:03");
  EXPECT_LE(DisplayWidth(line), 39u);
}

TEST(ProgressLineTest, Width200CapsTheBar) {
  const std::string line = ProgressLine(Halfway(), 200);
  EXPECT_EQ(line,
            "customers.csv  [################........................]   42%  5.2/12.3 MB  "
            "3.1 MB/s  ETA 0:03");
  EXPECT_LE(DisplayWidth(line), 199u);
}

TEST(ProgressLineTest, EveryWidthFits) {
  TransferProgress p = Halfway();
  p.label = "a-rather-long-file-name-for-a-dataset-of-customers.csv";
  for (int width = 1; width <= 220; ++width) {
    const std::string line = ProgressLine(p, width);
    EXPECT_LE(DisplayWidth(line), static_cast<size_t>(std::max(width - 1, 1))) << width;
    if (width >= 5) {
      EXPECT_THAT(line, HasSubstr("42%")) << width;
    }
    EXPECT_EQ(line.find('\n'), std::string::npos);
  }
  // A long label is shortened to 30 columns.
  EXPECT_THAT(ProgressLine(p, 120),
              testing::StartsWith("a-rather-long-file-name-for-a\xE2\x80\xA6  ["));
}

TEST(ProgressLineTest, NarrowWidthsDropTheEtaThenTheRate) {
  EXPECT_EQ(ProgressLine(Halfway(), 30), " 42%  5.2/12.3 MB  3.1 MB/s");
  EXPECT_EQ(ProgressLine(Halfway(), 20), " 42%  5.2/12.3 MB");
  EXPECT_EQ(ProgressLine(Halfway(), 10), " 42%");
}

TEST(ProgressLineTest, UnknownRateFinishedAndEmpty) {
  TransferProgress p = Halfway();
  p.bytes_per_second = 0;
  EXPECT_EQ(ProgressLine(p, 40), " 42%  5.2/12.3 MB  -- MB/s  ETA -:--");
  p.done = p.total;
  EXPECT_THAT(ProgressLine(p, 40), HasSubstr("100%  12.3/12.3 MB"));
  EXPECT_THAT(ProgressLine(p, 40), HasSubstr("ETA 0:00"));
  p.done = p.total = 0;
  EXPECT_THAT(ProgressLine(p, 40), HasSubstr("100%  0/0 B"));
  // Hours.
  p.done = 0;
  p.total = 10'000'000'000;
  p.bytes_per_second = 1'000'000;
  EXPECT_THAT(ProgressLine(p, 60), HasSubstr("0.0/10.0 GB  1.0 MB/s  ETA 2:46:40"));
}

ColumnProfile* AddNumeric(traind::v1::DatasetProfile* profile, const std::string& name,
                          int64_t distinct, double min, double max, double mean) {
  ColumnProfile* c = profile->add_columns();
  c->set_name(name);
  c->set_kind(ColumnProfile::NUMERIC);
  c->set_distinct(distinct);
  c->set_min(min);
  c->set_max(max);
  c->set_mean(mean);
  return c;
}

Dataset Iris() {
  Dataset d;
  d.set_name("iris");
  d.set_version(2);
  d.set_sha256(std::string(64, 'a'));
  d.set_size_bytes(3858);
  d.set_kind(Dataset::CSV);
  d.set_owner("sam");
  d.mutable_create_time()->set_seconds(1714566896);
  d.set_file_name("iris.csv");
  traind::v1::DatasetProfile* p = d.mutable_profile();
  p->set_rows(150);
  p->set_distinct_cap(1000);
  p->set_value_counts_cap(20);
  AddNumeric(p, "sepal_length", 35, 4.3, 7.9, 5.843333333);
  AddNumeric(p, "sepal_width", 23, 2, 4.4, 3.057333333);
  AddNumeric(p, "petal_length", 43, 1, 6.9, 3.758);
  AddNumeric(p, "petal_width", 22, 0.1, 2.5, 1.199333333);
  ColumnProfile* species = p->add_columns();
  species->set_name("species");
  species->set_kind(ColumnProfile::CATEGORICAL);
  species->set_distinct(3);
  for (const char* v : {"setosa", "versicolor", "virginica"}) {
    ColumnProfile::ValueCount* vc = species->add_value_counts();
    vc->set_value(v);
    vc->set_count(50);
  }
  d.add_job_ids("job-1");
  return d;
}

TEST(RenderDatasetTest, IrisProfile) {
  EXPECT_EQ(RenderDataset(Iris()),
            "dataset:  iris:2\n"
            "sha256:   " +
                std::string(64, 'a') +
                "\n"
                "size:     3.9 kB (3858 bytes)\n"
                "kind:     csv\n"
                "owner:    sam\n"
                "created:  2024-05-01T12:34:56+00:00\n"
                "file:     iris.csv\n"
                "rows:     150\n"
                "columns:  5\n"
                "\n"
                "COLUMN        KIND         MISSING  DISTINCT  MIN  MAX     MEAN\n"
                "sepal_length  numeric            0        35  4.3  7.9  5.84333\n"
                "sepal_width   numeric            0        23    2  4.4  3.05733\n"
                "petal_length  numeric            0        43    1  6.9    3.758\n"
                "petal_width   numeric            0        22  0.1  2.5  1.19933\n"
                "species       categorical        0         3    -    -        -\n"
                "\n"
                "top values:\n"
                "  species: setosa 50, versicolor 50, virginica 50\n"
                "\n"
                "jobs that used it (1):\n"
                "  job-1\n");
}

TEST(RenderDatasetTest, WideProfilesFit80Columns) {
  Dataset d = Iris();
  traind::v1::DatasetProfile* p = d.mutable_profile();
  ColumnProfile* wide = AddNumeric(p, "a_very_long_column_name_that_would_not_fit_in_the_table",
                                   123456, -1.2345678e7, 9.87654321e12, -0.000123456);
  wide->set_missing(1234567);
  wide->set_distinct_capped(true);
  ColumnProfile* empty = p->add_columns();
  empty->set_name("notes");
  empty->set_kind(ColumnProfile::EMPTY);
  empty->set_missing(150);
  ColumnProfile* cities = p->add_columns();
  cities->set_name("city_of_residence_at_the_time_of_the_survey");
  cities->set_kind(ColumnProfile::CATEGORICAL);
  cities->set_distinct(20);
  AddNumeric(p, "id", 10000, 0, 2999999, 1499999.5)->set_distinct_capped(true);
  for (int i = 0; i < 20; ++i) {
    ColumnProfile::ValueCount* vc = cities->add_value_counts();
    vc->set_value(i == 0 ? "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch"
                         : "City number " + std::to_string(i));
    vc->set_count(100 - i);
  }
  d.clear_job_ids();
  for (int i = 0; i < 40; ++i) d.add_job_ids("20240501-123456-job-" + std::to_string(i));

  const std::string text = RenderDataset(d);
  ExpectAllFit(text, 80);
  EXPECT_THAT(text, HasSubstr("123456+"));
  EXPECT_THAT(text, HasSubstr("1234567"));
  // Whole numbers in full below 1e9, long others three significant digits,
  // long names what room is left.
  EXPECT_THAT(text, HasSubstr("-12345678  9.88e+12  -0.000123\n"));
  EXPECT_THAT(text, HasSubstr("\nsepal_length      numeric "));
  EXPECT_THAT(text, HasSubstr("10000+          0   2999999    1.5e+06\n"));
  EXPECT_THAT(text, HasSubstr("\na_very_long_col\xE2\x80\xA6  numeric      1234567   123456+"));
  EXPECT_THAT(text, HasSubstr("notes"));
  // As many values as fit, then "…".
  EXPECT_THAT(text, HasSubstr("\n  city_of_residence_at_th\xE2\x80\xA6: Llanfairpwllgwyngyllgog"
                              "\xE2\x80\xA6 100, City number 1 99, \xE2\x80\xA6\n"));
  EXPECT_THAT(text, HasSubstr("jobs that used it (40):\n  20240501-123456-job-0  "));
  EXPECT_THAT(text, HasSubstr("20240501-123456-job-39\n"));
  // Wider terminals show more.
  const std::string wide_text = RenderDataset(d, 160);
  ExpectAllFit(wide_text, 160);
  EXPECT_THAT(wide_text, HasSubstr("a_very_long_column_name_that_would_not_fit_in_the_table"));
}

TEST(RenderDatasetTest, NoProfileNoJobs) {
  Dataset d;
  d.set_name("x");
  d.set_version(1);
  const std::string text = RenderDataset(d);
  EXPECT_THAT(text, HasSubstr("rows:     0\ncolumns:  0\n"));
  EXPECT_THAT(text, Not(HasSubstr("COLUMN")));
  EXPECT_THAT(text, HasSubstr("jobs that used it: none\n"));
}

TEST(RenderDatasetTest, Summary) {
  EXPECT_EQ(RenderDatasetSummary(Iris()),
            "dataset:  iris:2\n"
            "sha256:   " +
                std::string(64, 'a') +
                "\n"
                "size:     3.9 kB (3858 bytes)\n"
                "rows:     150\n"
                "columns:  5: sepal_length, sepal_width, petal_length, petal_width, species\n");
  Dataset d = Iris();
  for (int i = 0; i < 30; ++i)
    AddNumeric(d.mutable_profile(), "feature_" + std::to_string(i), 1, 0, 0, 0);
  ExpectAllFit(RenderDatasetSummary(d), 80);
  EXPECT_THAT(RenderDatasetSummary(d), HasSubstr("columns:  35: sepal_length, "));
}

TEST(RenderDatasetTest, ListAndDeleted) {
  traind::v1::ListDatasetsResponse list;
  EXPECT_EQ(RenderDatasetList(list), "no datasets\n");
  *list.add_datasets() = Iris();
  Dataset v1 = Iris();
  v1.set_version(1);
  v1.set_size_bytes(3800);
  v1.set_sha256(std::string(64, 'b'));
  *list.add_datasets() = v1;
  EXPECT_EQ(RenderDatasetList(list),
            "NAME  VERSION    SIZE  CREATED                    SHA256        FILE\n"
            "iris        2  3.9 kB  2024-05-01T12:34:56+00:00  aaaaaaaaaaaa  iris.csv\n"
            "iris        1  3.8 kB  2024-05-01T12:34:56+00:00  bbbbbbbbbbbb  iris.csv\n");
  list.mutable_datasets(1)->set_owner("ada");
  EXPECT_THAT(Lines(RenderDatasetList(list))[0], testing::EndsWith("FILE      OWNER"));

  traind::v1::DeleteDatasetResponse deleted;
  EXPECT_EQ(RenderDeletedDatasets(deleted), "nothing deleted\n");
  *deleted.add_deleted() = Iris();
  *deleted.add_deleted() = v1;
  EXPECT_EQ(RenderDeletedDatasets(deleted),
            "deleted iris:2 (3.9 kB)\n"
            "deleted iris:1 (3.8 kB)\n");
}

TEST(DatasetOverridesTest, TheListSubmitAppends) {
  const std::string data(64, 'd'), validation(64, 'v');
  EXPECT_TRUE(DatasetOverrides({}).empty());
  EXPECT_THAT(DatasetOverrides({data, ""}),
              ElementsAre("data.path=", "data.dataset=sha256:" + data));
  EXPECT_THAT(DatasetOverrides({"", validation}),
              ElementsAre("cross_validation.validation_path=",
                          "cross_validation.validation_dataset=sha256:" + validation));
  EXPECT_THAT(
      DatasetOverrides({data, validation}),
      ElementsAre("data.path=", "data.dataset=sha256:" + data, "cross_validation.validation_path=",
                  "cross_validation.validation_dataset=sha256:" + validation));
}

TEST(DatasetOverridesTest, AppliedAsSetOverridesTheyNameTheUploads) {
  // What submit does with them: the same path as --set.
  absl::StatusOr<traind::v1::JobSpec> spec = spec::ParseJobSpec(
      "data: {path: iris.csv, label: species}\n"
      "cross_validation: {folds: 3, validation_path: holdout.csv}\n",
      "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string data = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  const std::string validation = "1e5" + std::string(61, '0');  // no number for YAML
  for (const std::string& assignment : DatasetOverrides({data, validation})) {
    const size_t eq = assignment.find('=');
    ASSERT_TRUE(
        spec::SetJobSpecField(&*spec, assignment.substr(0, eq), assignment.substr(eq + 1)).ok())
        << assignment;
  }
  EXPECT_EQ(spec->data().path(), "");
  EXPECT_EQ(spec->data().dataset(), "sha256:" + data);
  EXPECT_EQ(spec->data().label(), "species");
  EXPECT_EQ(spec->cross_validation().validation_path(), "");
  EXPECT_EQ(spec->cross_validation().validation_dataset(), "sha256:" + validation);
  EXPECT_EQ(spec->cross_validation().folds(), 3);
}

TEST(RenderJobTest, NamesTheDatasetsItTrainsOn) {
  v1::Job job;
  job.set_id("j1");
  job.set_state(v1::Job::SUCCEEDED);
  EXPECT_THAT(RenderJob(job), Not(HasSubstr("dataset:")));
  const std::string data(64, 'd'), validation(64, 'v');
  job.mutable_spec()->mutable_data()->set_dataset("sha256:" + data);
  job.mutable_spec()->mutable_data()->set_dataset_sha256(data);
  EXPECT_THAT(RenderJob(job), HasSubstr("\ndataset:  sha256:" + data + "\nstate:    SUCCEEDED\n"));
  job.mutable_spec()->mutable_data()->set_dataset("customers:3");
  job.mutable_spec()->mutable_cross_validation()->set_validation_dataset_sha256(validation);
  EXPECT_THAT(RenderJob(job), HasSubstr("\ndataset:  sha256:" + data +
                                        " (customers:3); validation sha256:" + validation + "\n"));
}

}  // namespace
}  // namespace traind::client
